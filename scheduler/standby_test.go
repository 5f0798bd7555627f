package scheduler

import (
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
)

func TestStandby(t *testing.T) {
	// At a loose SLO the queueing model keeps the configs' order of
	// efficiency: the 10 % slice is the most efficient.
	slo := time.Second
	policy := ScalePolicy{Min: 1, Max: 5}
	base := AutoscaleInput{Now: t0, Rate: 20, Policy: policy, Replicas: replicas(configs[0]), Configs: configs, SLO: slo}
	with := func(f func(*StandbyInput)) StandbyInput {
		in := StandbyInput{AutoscaleInput: base, Settled: true}
		f(&in)
		return in
	}
	tests := []struct {
		name string
		in   StandbyInput
		want bool
	}{
		{"settled, in service, with traffic", with(func(*StandbyInput) {}), true},
		{"no SLO to size it by", with(func(in *StandbyInput) { in.SLO = 0 }), false},
		{"a start-up under way", with(func(in *StandbyInput) { in.Settled = false }), false},
		{"a warm replica already", with(func(in *StandbyInput) { in.Spare = 1 }), false},
		{"no replica in service", with(func(in *StandbyInput) { in.Replicas = nil }), false},
		{"no traffic", with(func(in *StandbyInput) { in.Rate = 0 }), false},
		{"at its scale maximum", with(func(in *StandbyInput) { in.Policy.Max = 1 }), false},
		{"no slice meets the SLO", with(func(in *StandbyInput) { in.SLO = time.Millisecond }), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Standby(tt.in, DefaultAutoscaleOptions)
			if ok != tt.want {
				t.Fatalf("Standby: %v %+v, want %v", ok, got, tt.want)
			}
			if ok && got != configs[0] {
				t.Fatalf("standby slice %+v, want the most efficient, %+v", got, configs[0])
			}
		})
	}
}

// A standby books memory only, beside a replica in service, where half
// the GPU's memory stays free; other placements see its memory as free,
// evict it first, and a promotion books its SM.
func TestSparePlacement(t *testing.T) {
	a := NewAllocator(inventory([]int64{16, 16}), nil)
	if _, err := reserve(a, "a", gpu.Request{SMPercent: 60, MemoryBytes: 2 << 30}); err != nil {
		t.Fatal(err)
	}
	busy := a.Placements()["a"].GPUs[0]
	if _, _, err := a.Place("too-big", gpu.Request{SMPercent: 20, MemoryBytes: 7 << 30}, Hints{Spare: true}); err == nil {
		t.Fatalf("a standby leaving 7 of 16 GiB free was placed: %v", a.Placements()["too-big"])
	}
	if _, _, err := a.Place("no-sm", gpu.Request{SMPercent: 50, MemoryBytes: 2 << 30}, Hints{Spare: true}); err == nil {
		t.Fatalf("a standby whose SM could never be promoted beside a was placed: %v", a.Placements()["no-sm"])
	}
	p, _, err := a.Place("s", gpu.Request{SMPercent: 30, MemoryBytes: 6 << 30}, Hints{Spare: true})
	if err != nil || p.GPUs[0] != busy {
		t.Fatalf("standby: %v, %v; want beside a on %s, never on the idle GPU", p.GPUs, err, busy)
	}
	if u := a.Usage()[0]; u.SMAllocated != 60 || !u.Replicas["s"].Idle {
		t.Fatalf("GPU after the standby: %d%% SM, standby idle %v; want 60 %%, idle", u.SMAllocated, u.Replicas["s"].Idle)
	}
	// Its memory is not "used" to a resize's memory check or a warm
	// lifetime's pressure either.
	if used, _, _ := a.Memory(busy); used != 2<<30 {
		t.Fatalf("memory used beside the standby: %d, want a's 2 GiB", used)
	}
	// 10 GiB fits on the busy GPU only once the standby goes, and fits on
	// the empty one as it is: the standby's memory counts as free, so
	// best fit still picks the busy GPU, and evicts the standby.
	p, evicted, err := a.Place("n", gpu.Request{SMPercent: 10, MemoryBytes: 10 << 30}, Hints{})
	if err != nil || p.GPUs[0] != busy || len(evicted) != 1 || evicted[0] != "s" {
		t.Fatalf("a replica beside the standby: %v, evicted %v, %v; want on %s, the standby evicted", p.GPUs, evicted, err, busy)
	}
	if err := a.Release("n", t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Place("s2", gpu.Request{SMPercent: 10, MemoryBytes: 1 << 30}, Hints{Spare: true}); err != nil {
		t.Fatal(err)
	}
	if err := a.Promote("s2"); err != nil {
		t.Fatal(err)
	}
	if u := a.Usage()[0]; u.SMAllocated != 70 || u.Replicas["s2"].Idle {
		t.Fatalf("after the promotion: %d%% SM; want 70 %%, the standby in service", u.SMAllocated)
	}
}
