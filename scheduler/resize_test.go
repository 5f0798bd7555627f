package scheduler

import (
	"reflect"
	"testing"
	"time"
)

func TestResize(t *testing.T) {
	// A loose SLO: each slice serves just under its throughput (40, 60,
	// 100 req/s), so the cases turn on cost alone.
	slo := 10 * time.Second
	small, mid, large := configs[0], configs[1], configs[2]
	quiet := t0.Add(-time.Hour) // the last scaling, long before
	in := func(rate float64, mem float64, reps ...SliceConfig) ResizeInput {
		return ResizeInput{Now: t0, Rate: rate, Policy: ScalePolicy{Min: 1, Max: 10}, Replicas: replicas(reps...),
			Configs: configs, SLO: slo, MemoryPercent: mem, LastScaleUp: quiet, LastScaleDown: quiet, LastResize: quiet}
	}
	tests := []struct {
		name    string
		in      ResizeInput
		wantOld []string
		wantNew SliceConfig
	}{
		{
			name: "an oversized replica gives way to the smallest slice covering its load",
			// 20 req/s x 1.25 = 25 needs only the 10 % slice (cost 10, not 50).
			in:      in(20, 0, large),
			wantOld: []string{"a"}, wantNew: small,
		},
		{
			name: "not while a flap holds the pool",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.FlapHeld = true
				return x
			}(),
		},
		{
			name: "not below the rate a rise points at: the smoothed rate lags it",
			// 20 req/s smoothed, 60 within the last tick: 75 needs the 50 % it has.
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.Rising = 60
				return x
			}(),
		},
		{
			name: "a rise the smaller slice still serves: resized",
			// 30 x 1.25 = 37.5 fits the 10 % slice (40 req/s).
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.Rising = 30
				return x
			}(),
			wantOld: []string{"a"}, wantNew: small,
		},
		{
			name: "a replica already right-sized stays",
			// 40 x 1.25 = 50 needs the 20 % slice it has.
			in: in(40, 0, mid),
		},
		{
			name: "a saving below ResizeMinSaving is not worth a start-up",
			// memory makes every slice cost 18 or more: 20 (20 %) -> 18 (10 %) saves 10 %.
			in: in(25, 18, mid),
		},
		{
			name: "small replicas merged into one slice of lower total cost",
			// memory 15 % each: three 10 % replicas cost 45; 60 x 1.25 = 75;
			// two of them (cost 30) give way to one 20 % (59 req/s, cost 20)
			// beside the third (together 86 req/s, timed at the
			// interference of neighbours 75 % busy: 87.5 req/s would be
			// past what they hold, see apartCapacity); all three would
			// need the 50 % (cost 50).
			in:      in(60, 15, small, small, small),
			wantOld: []string{"a", "b"}, wantNew: mid,
		},
		{
			name: "the scale minimum forbids a merge",
			in: func() ResizeInput {
				x := in(60, 15, small, small, small)
				x.Policy.Min = 3
				return x
			}(),
		},
		{
			name: "a multi-model function's cache floor forbids a merge",
			// The two it would merge hold the mix's models between them,
			// and one new replica would start with one of them.
			in: func() ResizeInput {
				x := in(60, 15, small, small, small)
				x.CacheFloor = 3
				return x
			}(),
		},
		{
			name: "within the cool-down of a scale-up",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.LastScaleUp = t0.Add(-10 * time.Second)
				return x
			}(),
		},
		{
			name: "within the cool-down of the last resize",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.LastResize = t0.Add(-10 * time.Second)
				return x
			}(),
		},
		{
			name: "not while a backlog waits",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.Backlog = 30
				return x
			}(),
		},
		{
			name: "not in an idle gap: the rate is decaying toward an off period's zero",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.LastRequest, x.WarmTTL = t0.Add(-5*time.Second), 10*time.Minute
				return x
			}(),
		},
		{
			name: "a request just now: resized",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.LastRequest, x.WarmTTL = t0.Add(-100*time.Millisecond), 10*time.Minute
				return x
			}(),
			wantOld: []string{"a"}, wantNew: small,
		},
		{
			name: "idle past a warm replica's lifetime: gone, not pausing, so resized",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.LastRequest, x.WarmTTL = t0.Add(-11*time.Minute), 10*time.Minute
				return x
			}(),
			wantOld: []string{"a"}, wantNew: small,
		},
		{
			name: "within the cool-down of the end of an idle gap: the rate still carries its decay",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.LastRequest, x.WarmTTL = t0, 10*time.Minute
				x.Resumed = t0.Add(-10 * time.Second)
				return x
			}(),
		},
		{
			name: "past that cool-down: resized",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.LastRequest, x.WarmTTL = t0, 10*time.Minute
				x.Resumed = t0.Add(-time.Minute)
				return x
			}(),
			wantOld: []string{"a"}, wantNew: small,
		},
		{
			name: "not without an SLO",
			in: func() ResizeInput {
				x := in(20, 0, large)
				x.SLO = 0
				return x
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Resize(tt.in, DefaultAutoscaleOptions)
			if ok != (tt.wantOld != nil) || !reflect.DeepEqual(got.Old, tt.wantOld) || (ok && got.New != tt.wantNew) {
				t.Fatalf("Resize = %+v, %v; want old %v new %+v", got, ok, tt.wantOld, tt.wantNew)
			}
			if !ok {
				return
			}
			// What is left must still serve the demand with the margin.
			sz := newSizer(tt.in.SLO, 0, tt.in.MemoryPercent)
			left := sz.capOf(got.New)
			for _, r := range tt.in.Replicas {
				if !contains(got.Old, r.ID) {
					left += sz.capOf(r.Config)
				}
			}
			if want := max(tt.in.Rate, tt.in.Rising) * ResizeMargin; left < want {
				t.Errorf("capacity after the resize %.1f < %.1f", left, want)
			}
		})
	}
}

func TestFillRightSizes(t *testing.T) {
	// Memory at 30 % of a GPU: the 10 % and 20 % slices cost the same 30,
	// the 50 % costs 50. Most efficient: 20 % (60 req/s per 30).
	policy := ScalePolicy{Min: 0, Max: 10}
	tests := []struct {
		name string
		rate float64
		want []SliceConfig
	}{
		// demand 75 x 1.2 = 90: one 20 % and the 10 % would cost 60; the
		// 50 % alone covers 90 for 50.
		{"one slice covering the whole gap for less than efficient + remainder", 75, []SliceConfig{configs[2]}},
		// 40 x 1.2 = 48: one slice; at equal cost the one with more capacity.
		{"a gap under one efficient replica takes the cheapest covering it", 40, []SliceConfig{configs[1]}},
		// 150 x 1.2 = 180 = 3 x 60.
		{"whole efficient replicas", 150, []SliceConfig{configs[1], configs[1], configs[1]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Autoscale(AutoscaleInput{Now: t0, Rate: tt.rate, Policy: policy, Configs: configs, MemoryPercent: 30}, DefaultAutoscaleOptions)
			if !reflect.DeepEqual(d.Add, tt.want) {
				t.Errorf("added %+v, want %+v", d.Add, tt.want)
			}
		})
	}
}

func TestAutoscaleFollowsARise(t *testing.T) {
	// The smoothed rate still says 10 req/s, the last tick's 100: the
	// scale-up plans for 100 at once.
	in := AutoscaleInput{Now: t0, Rate: 10, Rising: 100, Policy: ScalePolicy{Min: 1, Max: 10}, Replicas: replicas(configs[0]), Configs: configs}
	d := Autoscale(in, DefaultAutoscaleOptions)
	capacity := configs[0].Throughput
	for _, c := range d.Add {
		capacity += c.Throughput
	}
	if capacity < 100*DefaultAutoscaleOptions.Headroom {
		t.Errorf("added %+v: capacity %.0f, want ≥ %.0f", d.Add, capacity, 100*DefaultAutoscaleOptions.Headroom)
	}
	in.Rising = 0
	if d := Autoscale(in, DefaultAutoscaleOptions); !d.Empty() {
		t.Errorf("without the rise: %+v, want nothing (40 req/s covers 10 x 1.2)", d)
	}
}

func TestSmallestSlice(t *testing.T) {
	tests := []struct {
		name string
		mem  float64
		slo  time.Duration
		want SliceConfig
		ok   bool
	}{
		{"SM alone: the smallest slice", 0, time.Second, configs[0], true},
		{"memory sets the cost: the most capacity at that cost", 30, time.Second, configs[1], true},
		// Batch 1: 2L - s = L. 10 % (25 ms) and 20 % (16.7 ms) reach 15 ms
		// before any wait and carry nothing; 50 % (10 ms) does.
		{"only slices that carry load at the SLO", 0, 15 * time.Millisecond, configs[2], true},
		{"none carries load", 0, 5 * time.Millisecond, SliceConfig{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := SmallestSlice(configs, tt.slo, 0, tt.mem)
			if got != tt.want || ok != tt.ok {
				t.Errorf("SmallestSlice = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// A replacement may open a GPU only where it saves a GPU's worth: a pool
// of small slices filling every GPU's gaps leaves no room for the one
// that replaces them (MergeOpensGPU).
func TestResizeOpensGPUOnlyForAGPUsWorth(t *testing.T) {
	slo := 10 * time.Second
	small := configs[0]
	quiet := t0.Add(-time.Hour)
	pool := func(n int) []SliceConfig {
		out := make([]SliceConfig, n)
		for i := range out {
			out[i] = small
		}
		return out
	}
	tests := []struct {
		name  string
		reps  []SliceConfig
		opens bool
	}{
		{"three small ones merged save 25 of 45: on GPUs in use only", pool(3), false},
		{"twelve small ones merged save more than a GPU: it may open one", pool(12), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := ResizeInput{Now: t0, Rate: 60, Policy: ScalePolicy{Min: 1, Max: 20}, Replicas: replicas(tt.reps...),
				Configs: configs, SLO: slo, MemoryPercent: 15, LastScaleUp: quiet, LastScaleDown: quiet, LastResize: quiet}
			got, ok := Resize(in, DefaultAutoscaleOptions)
			if !ok {
				t.Fatalf("no resize of %d small replicas at 60 req/s", len(tt.reps))
			}
			if got.OpensGPU != tt.opens {
				t.Errorf("OpensGPU = %v, want %v (%s)", got.OpensGPU, tt.opens, got.Reason)
			}
		})
	}
}
