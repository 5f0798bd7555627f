package scheduler

import (
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Configs shaped like a profile: efficiency falls as the slice grows.
var configs = []SliceConfig{
	{SMPercent: 10, Batch: 1, Throughput: 40},  // 4.0 req/s per SM%
	{SMPercent: 20, Batch: 1, Throughput: 60},  // 3.0
	{SMPercent: 50, Batch: 1, Throughput: 100}, // 2.0
}

func replicas(cs ...SliceConfig) []ReplicaCapacity {
	var out []ReplicaCapacity
	for i, c := range cs {
		out = append(out, ReplicaCapacity{ID: string(rune('a' + i)), Config: c})
	}
	return out
}

func TestAutoscale(t *testing.T) {
	policy := ScalePolicy{Min: 1, Max: 10, ZeroDuration: time.Minute}
	tests := []struct {
		name       string
		in         AutoscaleInput
		opts       AutoscaleOptions // zero: DefaultAutoscaleOptions
		wantAdd    []SliceConfig
		wantRemove []string
	}{
		{
			name: "gap filled by the most efficient slice, remainder by the smallest covering it",
			// demand 100 x 1.2 = 120, capacity 40: gap 80 = 2 x 40 exactly.
			in:      AutoscaleInput{Now: t0, Rate: 100, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[0], configs[0]},
		},
		{
			name: "remainder above the efficient slice's throughput takes a bigger slice",
			// demand 130 x 1.2 = 156, capacity 40: gap 116 = 2 x 40 + 36 -> one more 10% (40 >= 36).
			in:      AutoscaleInput{Now: t0, Rate: 130, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[0], configs[0], configs[0]},
		},
		{
			name:    "max bounds the scale-up",
			in:      AutoscaleInput{Now: t0, Rate: 1000, Policy: ScalePolicy{Min: 1, Max: 3}, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[0], configs[0]},
		},
		{
			name:    "min is kept",
			in:      AutoscaleInput{Now: t0, Rate: 0, Policy: ScalePolicy{Min: 2, Max: 5}, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[0]},
		},
		{
			name: "surplus removed least efficient first after the cool-down",
			// demand 30 x 1.2 = 36; capacity 40 + 60 + 100 = 200; the 50% one (least efficient) goes, then the 20%.
			in: AutoscaleInput{Now: t0.Add(time.Hour), Rate: 30, Policy: policy,
				Replicas: replicas(configs[0], configs[1], configs[2]), Configs: configs},
			wantRemove: []string{"c", "b"},
		},
		{
			name: "a multi-model function keeps the replicas that hold its models",
			// As above, but two replicas' memory holds the models: only c goes.
			in: AutoscaleInput{Now: t0.Add(time.Hour), Rate: 30, Policy: policy, CacheFloor: 2,
				Replicas: replicas(configs[0], configs[1], configs[2]), Configs: configs},
			wantRemove: []string{"c"},
		},
		{
			name: "a cache floor at the replicas in service removes none",
			in: AutoscaleInput{Now: t0.Add(time.Hour), Rate: 30, Policy: policy, CacheFloor: 3,
				Replicas: replicas(configs[0], configs[1], configs[2]), Configs: configs},
		},
		{
			name: "a cache floor does not hold replicas above a lowered max",
			in: AutoscaleInput{Now: t0.Add(time.Hour), Rate: 30, Policy: ScalePolicy{Min: 1, Max: 1}, CacheFloor: 3,
				Replicas: replicas(configs[0], configs[1], configs[2]), Configs: configs},
			wantRemove: []string{"c", "b"},
		},
		{
			name: "a flap's hold at the replicas in service removes none",
			in: AutoscaleInput{Now: t0.Add(time.Hour), Rate: 30, Policy: policy, FlapFloor: 3,
				Replicas: replicas(configs[0], configs[1], configs[2]), Configs: configs},
		},
		{
			name: "a flap's hold below them leaves that many",
			in: AutoscaleInput{Now: t0.Add(time.Hour), Rate: 30, Policy: policy, FlapFloor: 2,
				Replicas: replicas(configs[0], configs[1], configs[2]), Configs: configs},
			wantRemove: []string{"c"},
		},
		{
			name: "no scale-down during the cool-down",
			in: AutoscaleInput{Now: t0.Add(10 * time.Second), LastScaleUp: t0, Rate: 30, Policy: policy,
				Replicas: replicas(configs[0], configs[2]), Configs: configs},
		},
		{
			name: "scale to zero after the idle time",
			in: AutoscaleInput{Now: t0.Add(2 * time.Minute), LastRequest: t0, Rate: 0,
				Policy: ScalePolicy{Min: 1, Max: 5, Zero: true, ZeroDuration: time.Minute}, Replicas: replicas(configs[0], configs[1]), Configs: configs},
			wantRemove: []string{"a", "b"},
		},
		{
			name: "not before the idle time",
			in: AutoscaleInput{Now: t0.Add(30 * time.Second), LastRequest: t0, Rate: 0,
				Policy: ScalePolicy{Min: 1, Max: 5, Zero: true, ZeroDuration: time.Minute}, Replicas: replicas(configs[0]), Configs: configs},
		},
		{
			name: "at zero with no traffic stays at zero",
			in:   AutoscaleInput{Now: t0, Rate: 0, Policy: ScalePolicy{Min: 1, Max: 5, Zero: true, ZeroDuration: time.Minute}, Configs: configs},
		},
		{
			name:    "at zero with traffic scales up",
			in:      AutoscaleInput{Now: t0, Rate: 10, Policy: ScalePolicy{Min: 1, Max: 5, Zero: true, ZeroDuration: time.Minute}, Configs: configs},
			wantAdd: []SliceConfig{configs[0]},
		},
		// Backlog: demand = rate x headroom + backlog / drain time.
		{
			name: "a backlog adds what drains it within the drain time",
			// demand 100 x 1.2 + 400 / 5 s = 200, capacity 40: gap 160 = 4 x 40
			// (the rate alone would add 2).
			in:      AutoscaleInput{Now: t0, Rate: 100, Backlog: 400, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[0], configs[0], configs[0], configs[0]},
		},
		{
			name: "a backlog scales up a function whose rate is covered",
			// demand 30 x 1.2 + 100 / 5 s = 56 > capacity 40: gap 16, one 10% slice covers it.
			in:      AutoscaleInput{Now: t0, Rate: 30, Backlog: 100, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[0]},
		},
		{
			name: "a longer drain time asks for less",
			// demand 100 x 1.2 + 400 / 20 s = 140, capacity 40: gap 100 = 2 x 40 + 20.
			in:      AutoscaleInput{Now: t0, Rate: 100, Backlog: 400, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			opts:    AutoscaleOptions{Headroom: 1.2, CoolDown: 30 * time.Second, DrainTime: 20 * time.Second},
			wantAdd: []SliceConfig{configs[0], configs[0], configs[0]},
		},
		{
			// Callers that set Headroom and CoolDown only (the provider's
			// flags) still drain a backlog.
			name:    "a drain time of 0 takes the default",
			in:      AutoscaleInput{Now: t0, Rate: 100, Backlog: 400, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			opts:    AutoscaleOptions{Headroom: 1.2, CoolDown: 30 * time.Second},
			wantAdd: []SliceConfig{configs[0], configs[0], configs[0], configs[0]},
		},
		{
			name: "no backlog is today's rule: the rate is covered, nothing to add",
			// demand 30 x 1.2 = 36 <= capacity 40, one replica at the floor.
			in: AutoscaleInput{Now: t0, Rate: 30, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
		},
		{
			name: "scale-down keeps the capacity a backlog needs",
			// demand 30 x 1.2 + 500 / 5 s = 136; capacity 200. Without the 50% one
			// (least efficient) 100 < 136: kept; without the 20% one 140 >= 136: removed.
			in: AutoscaleInput{Now: t0.Add(time.Hour), Rate: 30, Backlog: 500, Policy: policy,
				Replicas: replicas(configs[0], configs[1], configs[2]), Configs: configs},
			wantRemove: []string{"b"},
		},
		{
			name: "at zero, a backlog scales up even before the rate shows",
			in:   AutoscaleInput{Now: t0, Rate: 0, Backlog: 5, Policy: ScalePolicy{Min: 1, Max: 5, Zero: true, ZeroDuration: time.Minute}, Configs: configs},
			// demand 5 / 5 s = 1 req/s.
			wantAdd: []SliceConfig{configs[0]},
		},
		{
			name: "no scale to zero while requests wait",
			// idle long enough, but 3 wait: only the surplus above the floor goes.
			in: AutoscaleInput{Now: t0.Add(2 * time.Minute), LastRequest: t0, Rate: 0, Backlog: 3,
				Policy: ScalePolicy{Min: 1, Max: 5, Zero: true, ZeroDuration: time.Minute}, Replicas: replicas(configs[0], configs[1]), Configs: configs},
			wantRemove: []string{"b"},
		},
		// Parked processes: the adds that take them serve first.
		{
			name: "a parked process takes the one slice that completes the pool",
			// demand 120, capacity 40: two 10 % adds, one parked; one 50 % (100) completes it.
			in:      AutoscaleInput{Now: t0, Rate: 100, Parked: 1, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[2]},
		},
		{
			name:    "a scale-up the parked processes cover is right-sized",
			in:      AutoscaleInput{Now: t0, Rate: 100, Parked: 2, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[0], configs[0]},
		},
		{
			name: "past what a parked process can carry, the rest is right-sized",
			// demand 240, capacity 40: the parked one takes 50 % (100, the most),
			// and the 100 left is three 10 % slices, not five.
			in:      AutoscaleInput{Now: t0, Rate: 200, Parked: 1, Policy: policy, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[2], configs[0], configs[0], configs[0]},
		},
		{
			name: "min still holds after a parked scale-up",
			// the 50 % one completes the pool, one replica short of the minimum of 3.
			in:      AutoscaleInput{Now: t0, Rate: 100, Parked: 1, Policy: ScalePolicy{Min: 3, Max: 10}, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[2], configs[0]},
		},
		{
			name: "max still bounds a parked scale-up",
			// no pool within max serves 1,200: the parked one takes the most,
			// the other the most efficient, as fill leaves an overload.
			in:      AutoscaleInput{Now: t0, Rate: 1000, Parked: 1, Policy: ScalePolicy{Min: 1, Max: 3}, Replicas: replicas(configs[0]), Configs: configs},
			wantAdd: []SliceConfig{configs[2], configs[0]},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			if opts == (AutoscaleOptions{}) {
				opts = DefaultAutoscaleOptions
			}
			d := Autoscale(tt.in, opts)
			if !reflect.DeepEqual(d.Add, tt.wantAdd) || !reflect.DeepEqual(d.Remove, tt.wantRemove) {
				t.Fatalf("add %v remove %v (%s); want add %v remove %v", d.Add, d.Remove, d.Reason, tt.wantAdd, tt.wantRemove)
			}
			if !d.Empty() && d.Reason == "" {
				t.Fatal("a decision must say why")
			}
			if len(d.Add) > 0 && tt.in.Backlog > 0 && !strings.Contains(d.Reason, "backlog") {
				t.Fatalf("a scale-up for a backlog must say so: %q", d.Reason)
			}
		})
	}
}

func TestRateEstimator(t *testing.T) {
	e := RateEstimator{HalfLife: 10 * time.Second}
	e.Observe(0, t0)
	var r float64
	for i := 1; i <= 120; i++ { // 50 req/s for two minutes
		r = e.Observe(uint64(50*i), t0.Add(time.Duration(i)*time.Second))
	}
	if math.Abs(r-50) > 0.5 {
		t.Fatalf("steady 50 req/s estimated as %.2f", r)
	}
	r = e.Observe(uint64(50*120), t0.Add(130*time.Second)) // 10 s of silence: one half-life
	if math.Abs(r-25) > 0.5 {
		t.Fatalf("after one half-life of silence the rate should halve, got %.2f", r)
	}
}

// fill right-sizes the last copy of every candidate plan before it
// compares their costs: one 30 % replica, two 15 % ones and three 10 %
// ones all cost 30 before it, and 15 % + 10 % (25) serve too.
func TestFillCompletesEveryCandidate(t *testing.T) {
	menu := []SliceConfig{
		{SMPercent: 10, Batch: 1, Throughput: 40},
		{SMPercent: 15, Batch: 1, Throughput: 60},
		{SMPercent: 30, Batch: 1, Throughput: 100},
	}
	sz := newSizer(0, 0, 0)
	got := fill(menu, nil, 100, 10, menu[0], sz)
	cost := 0.0
	for _, c := range got {
		cost += sz.cost(c)
	}
	if cost != 25 {
		t.Fatalf("fill for 100 req/s: %+v at cost %.0f, want 15 %% + 10 %% at 25", got, cost)
	}
}
