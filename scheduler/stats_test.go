package scheduler

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// TestNoFitCodes: each way a replica can fit nowhere has its code, so a
// pending replica's cause can label a metric.
func TestNoFitCodes(t *testing.T) {
	tests := []struct {
		name   string
		inv    gpu.Inventory
		before []gpu.Request // placed first
		req    gpu.Request
		want   NoFitCode
	}{
		{"every GPU lacks SM", inventory([]int64{16, 16}), []gpu.Request{{SMPercent: 70, MemoryBytes: 1 << 30}, {SMPercent: 70, MemoryBytes: 1 << 30}},
			gpu.Request{SMPercent: 40, MemoryBytes: 1 << 30}, NoFitSM},
		{"SM free, memory not", inventory([]int64{16, 16}), []gpu.Request{{SMPercent: 10, MemoryBytes: 12 << 30}, {SMPercent: 10, MemoryBytes: 12 << 30}},
			gpu.Request{SMPercent: 10, MemoryBytes: 5 << 30}, NoFitMemory},
		{"one GPU lacks SM, the other memory", inventory([]int64{16, 16}), []gpu.Request{{SMPercent: 90, MemoryBytes: 12 << 30}, {SMPercent: 10, MemoryBytes: 12 << 30}},
			gpu.Request{SMPercent: 20, MemoryBytes: 5 << 30}, NoFitSMOrMemory},
		{"too few empty GPUs on any node", inventory([]int64{16, 16}, []int64{16}), []gpu.Request{{SMPercent: 10, MemoryBytes: 1 << 30}},
			gpu.Request{WholeGPUs: 2}, NoFitWholeGPUs},
		{"no GPU for a slice", gpu.Inventory{}, nil, gpu.Request{SMPercent: 10, MemoryBytes: 1 << 30}, NoFitNoGPU},
		{"no GPU for whole GPUs", gpu.Inventory{}, nil, gpu.Request{WholeGPUs: 1}, NoFitNoGPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator(tt.inv, nil)
			for i, r := range tt.before {
				if _, _, err := a.Place(string(rune('a'+i)), r, Hints{}); err != nil {
					t.Fatal(err)
				}
			}
			_, _, err := a.Place("new", tt.req, Hints{})
			var nf *NoFitError
			if !errors.As(err, &nf) || nf.Code != tt.want || NoFitCodeOf(err) != tt.want {
				t.Fatalf("err = %v (%#v), want a NoFitError of code %q", err, nf, tt.want)
			}
		})
	}
	if NoFitCodeOf(errors.New("other")) != "" || NoFitCodeOf(nil) != "" {
		t.Fatal("only a NoFitError has a code")
	}
}

func TestPromoteWithoutRoomIsNoFitSM(t *testing.T) {
	a := NewAllocator(inventory([]int64{16}), nil)
	if _, _, err := a.Place("warm", gpu.Request{SMPercent: 60, MemoryBytes: 1 << 30}, Hints{}); err != nil {
		t.Fatal(err)
	}
	_ = a.Demote("warm", time.Now())
	if _, _, err := a.Place("busy", gpu.Request{SMPercent: 60, MemoryBytes: 1 << 30}, Hints{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Promote("warm"); NoFitCodeOf(err) != NoFitSM {
		t.Fatalf("promote = %v, want a NoFitError of code sm", err)
	}
}

func TestHistogramIsCumulative(t *testing.T) {
	h := newHistogram([]float64{0.1, 1, 10})
	for _, d := range []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 2 * time.Second, time.Minute} {
		h.Observe(d)
	}
	want := map[float64]uint64{0.1: 2, 1: 2, 10: 3} // a bound holds what equals it; a minute only counts in Count
	if got := h.Buckets(); !reflect.DeepEqual(got, want) || h.Count != 4 || h.Sum != 0.05+0.1+2+60 {
		t.Fatalf("buckets %v count %d sum %g; want %v, 4, 62.15", got, h.Count, h.Sum, want)
	}
}

func TestStatsRecorder(t *testing.T) {
	r := NewStatsRecorder()
	noFit := &NoFitError{Code: NoFitSM}
	for _, c := range []struct {
		evicted []string
		err     error
	}{{nil, nil}, {nil, nil}, {[]string{"w1", "w2"}, nil}, {nil, noFit}} {
		r.Placed(c.evicted, c.err, time.Microsecond)
	}
	r.Started(3 * time.Second)
	r.Loaded(ModelLoadCold, 2*time.Second)
	r.Loaded(ModelLoadCold, time.Second)
	r.Loaded(ModelLoadNode, time.Second)
	s := r.Stats()
	d := s.Decisions
	if d.Placed != 2 || d.PlacedWithEviction != 1 || d.Pending != 1 || d.Seconds.Count != 4 {
		t.Fatalf("decisions %+v, want 2 placed, 1 with eviction, 1 pending, 4 timed", d)
	}
	if s.StartupSeconds.Count != 1 || s.StartupSeconds.Sum != 3 {
		t.Fatalf("start-ups %+v", s.StartupSeconds)
	}
	if c, n := s.ModelLoadSeconds[ModelLoadCold], s.ModelLoadSeconds[ModelLoadNode]; c.Count != 2 || c.Sum != 3 || n.Count != 1 || len(s.ModelLoadSeconds) != 2 {
		t.Fatalf("model loads %+v", s.ModelLoadSeconds)
	}
	// A copy: what the recorder counts next does not change it.
	r.Placed(nil, nil, time.Microsecond)
	r.Loaded(ModelLoadCold, time.Second)
	if s.Decisions.Seconds.Count != 4 || s.Decisions.Seconds.Buckets()[1e-6] != 4 || s.ModelLoadSeconds[ModelLoadCold].Count != 2 {
		t.Fatal("Stats shares its counts with the recorder")
	}
	if len(NewStatsRecorder().Stats().ModelLoadSeconds) != 0 {
		t.Fatal("no load counted: no model load histograms")
	}
}
