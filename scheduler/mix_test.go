package scheduler

import (
	"math"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

func TestMixSlice(t *testing.T) {
	// light: 10 ms at batch 1, 20 ms at batch 4 (20 % SM); heavy: three
	// times as slow. Both measured at 20 % and 50 % SM.
	light := indexed(t, &profiles.Profile{Model: "light", GPU: "g", LoadTime: time.Second, Points: []profiles.Point{
		{Batch: 1, SM: 20, Quota: 100, Latency: 10}, {Batch: 4, SM: 20, Quota: 100, Latency: 20},
		{Batch: 1, SM: 50, Quota: 100, Latency: 5}, {Batch: 4, SM: 50, Quota: 100, Latency: 10},
	}})
	heavy := indexed(t, &profiles.Profile{Model: "heavy", GPU: "g", LoadTime: 3 * time.Second, Points: []profiles.Point{
		{Batch: 1, SM: 20, Quota: 100, Latency: 30}, {Batch: 4, SM: 20, Quota: 100, Latency: 60},
		{Batch: 1, SM: 50, Quota: 100, Latency: 15}, {Batch: 4, SM: 50, Quota: 100, Latency: 30},
	}})
	half := []ModelShare{{light, 0.5}, {heavy, 0.5}}
	tests := []struct {
		name      string
		mix       Mix
		sm, batch int
		slo       time.Duration
		wantTp    float64 // req/s
		wantOK    bool
	}{
		{"one model: its own slice", Mix{Models: []ModelShare{{light, 1}}}, 20, 4, time.Second, 4 / 0.020, true},
		{"an even mix: the mean batch latency", Mix{Models: half}, 20, 1, time.Second, 1 / 0.020, true},
		// 4 requests of a 3:1 mix: light among them with probability
		// 1 - 0.25^4, about 3 of them, run as a batch of 4 (the batch
		// measured); heavy with probability 1 - 0.75^4, 1.46 of them, at
		// batch 4 too (no batch 2 measured).
		{"one batch per model among the requests", Mix{Models: []ModelShare{{light, 3}, {heavy, 1}}}, 20, 4, time.Second,
			4 / ((1-math.Pow(0.25, 4))*0.020 + (1-math.Pow(0.75, 4))*0.060), true},
		{"batch 1: the shares' mean latency", Mix{Models: []ModelShare{{light, 3}, {heavy, 1}}}, 20, 1, time.Second, 1 / (0.75*0.010 + 0.25*0.030), true},
		{"loads are not in the slice (MixDemand)", Mix{Models: half, LoadPerRequest: 0.01}, 20, 4, time.Second, 4 / ((1 - math.Pow(0.5, 4)) * (0.020 + 0.060)), true},
		// At 20 % batch 4 the heavy model alone needs 2L - L/b = 105 ms:
		// over a 100-ms SLO.
		{"a model that cannot make the SLO there rules the slice out", Mix{Models: half}, 20, 4, 100 * time.Millisecond, 4 / (2 * (1 - math.Pow(0.5, 4)) * 0.040), false},
		{"a larger slice serves both", Mix{Models: half}, 50, 4, 100 * time.Millisecond, 4 / (2 * (1 - math.Pow(0.5, 4)) * 0.020), true},
		{"a share of zero does not count", Mix{Models: []ModelShare{{light, 1}, {heavy, 0}}}, 20, 4, 100 * time.Millisecond, 4 / 0.020, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, ok := MixSlice(tt.mix, tt.sm, tt.batch, tt.slo)
			if ok != tt.wantOK || math.Abs(c.Throughput-tt.wantTp) > 1e-6*tt.wantTp || c.SMPercent != tt.sm || c.Batch != tt.batch {
				t.Errorf("MixSlice = %+v, %v; want throughput %.3f, %v", c, ok, tt.wantTp, tt.wantOK)
			}
		})
	}

	menu := MixConfigs(Mix{Models: half}, 100*time.Millisecond, 0)
	want := []SliceConfig{{SMPercent: 20, Batch: 1, Throughput: 1 / 0.020}, {SMPercent: 50, Batch: 1, Throughput: 1 / 0.010},
		{SMPercent: 50, Batch: 4, Throughput: 4 / (2 * (1 - math.Pow(0.5, 4)) * 0.020)}}
	if len(menu) != len(want) {
		t.Fatalf("MixConfigs = %+v, want %+v", menu, want)
	}
	for i := range want {
		if menu[i].SMPercent != want[i].SMPercent || menu[i].Batch != want[i].Batch || math.Abs(menu[i].Throughput-want[i].Throughput) > 1e-6 {
			t.Errorf("MixConfigs[%d] = %+v, want %+v", i, menu[i], want[i])
		}
	}
	if got := MixConfigs(Mix{Models: half}, 100*time.Millisecond, 1); len(got) != 2 {
		t.Errorf("MixConfigs at max batch 1 = %+v, want the two batch-1 slices", got)
	}
	if got := MixConfigs(Mix{}, time.Second, 0); got != nil {
		t.Errorf("MixConfigs of no models = %+v, want none", got)
	}
}

func TestMixDemand(t *testing.T) {
	menu := []SliceConfig{{SMPercent: 10, Batch: 1, Throughput: 50}, {SMPercent: 50, Batch: 8, Throughput: 400}, {SMPercent: 100, Batch: 8, Throughput: 300}}
	tests := []struct {
		name string
		load float64
		menu []SliceConfig
		want float64
	}{
		// 5 ms of loading per request would have served 2 more requests
		// per request at 400 req/s.
		{"the fastest slice values the load time", 0.005, menu, 3},
		{"no loads", 0, menu, 1},
		{"no menu", 0.005, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MixDemand(tt.load, tt.menu); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("MixDemand = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMixLoad(t *testing.T) {
	light := &profiles.Profile{LoadTime: time.Second}
	heavy := &profiles.Profile{LoadTime: 3 * time.Second}
	tests := []struct {
		name            string
		models          []ModelShare
		loads, requests float64
		want            float64
	}{
		{"one load in ten, a mean load of 2 s", []ModelShare{{light, 1}, {heavy, 1}}, 10, 100, 0.2},
		{"the shares weigh the load times", []ModelShare{{light, 3}, {heavy, 1}}, 10, 100, 0.15},
		{"no loads", []ModelShare{{light, 1}}, 0, 100, 0},
		{"no requests", []ModelShare{{light, 1}}, 3, 0, 0},
		{"more loads than requests count as one each", []ModelShare{{light, 1}}, 5, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MixLoad(tt.models, tt.loads, tt.requests); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("MixLoad = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCacheFloor(t *testing.T) {
	const gib = int64(1) << 30
	model := func(size int64) *profiles.Profile {
		return &profiles.Profile{Model: "m", ModelSizeBytes: size, MemoryBytes: size + gib}
	}
	big, small := model(3*gib), model(gib)
	tests := []struct {
		name     string
		models   []ModelShare
		room     int64
		quantile float64
		want     int
	}{
		{"room unknown: no floor", []ModelShare{{big, 1}}, 0, 0.99, 0},
		{"no models seen", nil, 8 * gib, 0.99, 0},
		{"all fit in one", []ModelShare{{big, 1}, {small, 1}}, 8 * gib, 0.99, 1},
		{"three large need two", []ModelShare{{big, 1}, {big, 1}, {big, 1}}, 8 * gib, 0.99, 2},
		// The rarest model carries 1 % of the requests: at p99 it loads
		// on demand; at p99.9 it must be held too.
		{"a model past the quantile is not held", []ModelShare{{big, 49.5}, {big, 49.5}, {big, 1}}, 6 * gib, 0.99, 1},
		{"a higher quantile holds it", []ModelShare{{big, 49.5}, {big, 49.5}, {big, 1}}, 6 * gib, 0.999, 2},
		{"the default quantile outside (0, 1)", []ModelShare{{big, 49.5}, {big, 49.5}, {big, 1}}, 6 * gib, 0, 1},
		{"a model larger than the room counts as one replica", []ModelShare{{model(10 * gib), 1}}, 8 * gib, 0.99, 1},
		{"no model size: its memory", []ModelShare{{&profiles.Profile{Model: "m", MemoryBytes: 5 * gib}, 1}, {small, 1}}, 5 * gib, 0.99, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CacheFloor(tt.models, tt.room, tt.quantile); got != tt.want {
				t.Errorf("CacheFloor = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestCacheFillTime(t *testing.T) {
	const gib = 1 << 30
	model := func(name string, size int64, load time.Duration) *profiles.Profile {
		return &profiles.Profile{Model: name, ModelSizeBytes: size * gib, LoadTime: load}
	}
	a, b, c := model("a", 2, 3*time.Second), model("b", 2, 5*time.Second), model("c", 4, 7*time.Second)
	tests := []struct {
		name   string
		models []ModelShare
		first  *profiles.Profile // loaded by the start-up
		room   int64
		want   time.Duration
	}{
		{"one model, the start-up's: nothing more", []ModelShare{{a, 1}}, a, 8 * gib, 0},
		{"every model fits: all but the start-up's", []ModelShare{{a, 1}, {b, 3}, {c, 2}}, a, 8 * gib, 5*time.Second + 7*time.Second},
		{"the start-up's takes its room first, the most requested next", []ModelShare{{a, 1}, {b, 3}, {c, 2}}, a, 6 * gib, 5 * time.Second},
		{"a model too large for what is left is passed over", []ModelShare{{c, 3}, {b, 1}}, a, 5 * gib, 5 * time.Second},
		{"the start-up's model need not be in the mix", []ModelShare{{b, 1}}, a, 8 * gib, 5 * time.Second},
		{"a model no request names is not loaded", []ModelShare{{a, 1}, {b, 0}}, a, 8 * gib, 0},
		{"no room beyond the start-up's: nothing", []ModelShare{{a, 1}, {b, 1}}, a, 2 * gib, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CacheFillTime(tc.models, tc.first, tc.room); got != tc.want {
				t.Errorf("CacheFillTime = %s, want %s", got, tc.want)
			}
		})
	}
}
