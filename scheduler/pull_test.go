package scheduler

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func waiting(models ...string) []Waiting {
	q := make([]Waiting, len(models))
	for i, m := range models {
		q[i] = Waiting{Seq: uint64(i + 1), Model: m}
	}
	return q
}

func TestPull(t *testing.T) {
	// holdsOf makes a Holds from one model list per slot.
	holdsOf := func(held ...string) func(int, string) bool {
		return func(i int, m string) bool { return held[i] == m }
	}
	tests := []struct {
		name  string
		queue []Waiting
		slots []Slot
		view  PullView
		want  []Grant
	}{
		{"nothing waits", nil, []Slot{{Batch: 4, Throughput: 100}}, PullView{}, nil},
		{"no replica", waiting("", ""), nil, PullView{}, nil},
		{"a full replica takes nothing", waiting(""), []Slot{{InFlight: 4, Batch: 4, Throughput: 100}}, PullView{}, nil},
		{"up to its batch size, oldest first", waiting("", "", ""), []Slot{{InFlight: 2, Batch: 4, Throughput: 100}},
			PullView{}, []Grant{{0, 0}, {1, 0}}},
		{"the faster of two idle slices", waiting(""), []Slot{{Batch: 4, Throughput: 50}, {Batch: 4, Throughput: 100}},
			PullView{}, []Grant{{0, 1}}},
		{"the slower slice when it completes sooner", waiting(""), []Slot{{Batch: 4, Throughput: 50}, {InFlight: 3, Batch: 4, Throughput: 100}},
			PullView{}, []Grant{{0, 0}}},
		{"an idle slice before a running batch it would wait behind", waiting(""), []Slot{{InFlight: 1, Batch: 2, Throughput: 79}, {Batch: 1, Throughput: 39}},
			PullView{}, []Grant{{0, 1}}},
		{"a running batch when no replica is idle, the one with fewest in flight", waiting(""), []Slot{{InFlight: 2, Batch: 4, Throughput: 100}, {InFlight: 1, Batch: 4, Throughput: 100}},
			PullView{}, []Grant{{0, 1}}},
		{"work spreads by completion, not count", waiting("", "", "", ""), []Slot{{Batch: 8, Throughput: 50}, {Batch: 8, Throughput: 150}},
			PullView{}, []Grant{{0, 1}, {1, 1}, {2, 0}, {3, 1}}},
		{"a slice not known is never held back", waiting("", "", ""), []Slot{{InFlight: 9}},
			PullView{}, []Grant{{0, 0}, {1, 0}, {2, 0}}},
		{"a slice not known goes by count", waiting(""), []Slot{{InFlight: 2}, {InFlight: 1}},
			PullView{}, []Grant{{0, 1}}},
		{"a known slice before one not known", waiting(""), []Slot{{}, {InFlight: 1, Batch: 2, Throughput: 10}},
			PullView{}, []Grant{{0, 1}}},
		{"the holder over a faster one that would load", waiting("x"), []Slot{{Batch: 2, Throughput: 100}, {Batch: 2, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 2}, []Grant{{0, 1}}},
		{"waits for a busy holder", waiting("x"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 2}, nil},
		{"past the bound it loads elsewhere", waiting("x", "x", "x"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 2, OutOfOrder: true}, []Grant{{2, 0}}},
		{"a load goes to the replica holding fewest models", waiting("z"),
			[]Slot{{Batch: 1, Throughput: 10, Models: 3}, {Batch: 1, Throughput: 10, Models: 1}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("a", "b", "c"), Bound: 2}, []Grant{{0, 1}}},
		{"in order nothing overtakes a waiting request", waiting("x", "y"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("y", "x"), Bound: 2}, nil},
		{"out of order a hit overtakes", waiting("x", "y"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("y", "x"), Bound: 2, OutOfOrder: true}, []Grant{{1, 0}}},
		{"out of order hits before an older load", waiting("z", "y"), []Slot{{Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("y"), Bound: 2, OutOfOrder: true}, []Grant{{1, 0}}},
		// With load times: a busy holder at 10 req/s serves the 1st and
		// 2nd request waiting for it in 0.1 and 0.2 s.
		{"with load times and an SLO, waits while the holder is sooner than a load, past the bound", waiting("x", "x"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 1, OutOfOrder: true, LoadSeconds: func(string) float64 { return 0.25 }, SLO: 10}, nil},
		{"with load times and no SLO, the bound caps the wait", waiting("x", "x"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 1, OutOfOrder: true, LoadSeconds: func(string) float64 { return 0.25 }}, []Grant{{1, 0}}},
		{"with load times, loads once a load is sooner", waiting("x", "x", "x"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 9, OutOfOrder: true, LoadSeconds: func(string) float64 { return 0.25 }}, []Grant{{2, 0}}},
		{"with load times, waits within half the SLO only", waiting("x", "x"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 9, OutOfOrder: true, LoadSeconds: func(string) float64 { return 5 }, SLO: 0.3}, []Grant{{1, 0}}},
		{"a model of unknown load time keeps the bound", waiting("x", "x"), []Slot{{Batch: 1, Throughput: 10}, {InFlight: 1, Batch: 1, Throughput: 10}},
			PullView{Holds: holdsOf("", "x"), Bound: 1, OutOfOrder: true, LoadSeconds: func(string) float64 { return 0 }}, []Grant{{1, 0}}},
		{"a holder of unknown slice is preferred below the bound", waiting("x"), []Slot{{}, {InFlight: 1}},
			PullView{Holds: holdsOf("", "x"), Bound: 2}, []Grant{{0, 1}}},
		{"a holder of unknown slice at the bound: the least loaded", waiting("x"), []Slot{{}, {InFlight: 2}},
			PullView{Holds: holdsOf("", "x"), Bound: 2}, []Grant{{0, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slots := slices.Clone(tt.slots)
			got := Pull(tt.queue, slots, tt.view, nil)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Pull = %v, want %v", got, tt.want)
			}
			for _, g := range got {
				slots[g.Slot].InFlight--
			}
			if !slices.Equal(slots, tt.slots) {
				t.Fatalf("slots after the grants, less them: %v, want %v", slots, tt.slots)
			}
		})
	}
}

// TestPullJustStartedTakesTheQueue: while the only replica is full a queue
// builds; the replica that starts next takes from it at once, up to its
// batch size, oldest first.
func TestPullJustStartedTakesTheQueue(t *testing.T) {
	queue := waiting("", "", "", "", "", "")
	slots := []Slot{{InFlight: 4, Batch: 4, Throughput: 100}}
	if got := Pull(queue, slots, PullView{}, nil); len(got) != 0 {
		t.Fatalf("a full replica took %v", got)
	}
	slots = append(slots, Slot{Batch: 4, Throughput: 100})
	got := Pull(queue, slots, PullView{}, nil)
	want := []Grant{{0, 1}, {1, 1}, {2, 1}, {3, 1}}
	if !slices.Equal(got, want) {
		t.Fatalf("the new replica took %v, want %v", got, want)
	}
}

// TestPullShareFollowsSpeed: a saturated queue in front of slices of
// different speeds. Each request takes Batch/Throughput on its replica
// (b requests at a time, each at the slice's rate over b), and the
// replicas pull whenever one finishes: each serves in proportion to its
// speed, where push by count would give each the same.
func TestPullShareFollowsSpeed(t *testing.T) {
	tests := []struct {
		speeds []float64
		batch  int
	}{
		{[]float64{100, 50}, 4},
		{[]float64{300, 100, 100}, 8},
		{[]float64{40, 40}, 2},
		{[]float64{120, 30}, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.speeds), func(t *testing.T) {
			served := pullSaturated(tt.speeds, tt.batch, 20000)
			total := 0.0
			for _, s := range tt.speeds {
				total += s
			}
			for i, s := range tt.speeds {
				want := s / total
				got := float64(served[i]) / 20000
				if math.Abs(got-want) > 0.02 {
					t.Errorf("replica %d at %v req/s served %.3f of the requests, want %.3f", i, s, got, want)
				}
			}
		})
	}
}

// pullSaturated serves n requests, all queued at time 0, on replicas of
// the given speeds, and counts what each served.
func pullSaturated(speeds []float64, batch, n int) []int {
	slots := make([]Slot, len(speeds))
	var ends [][]float64 // per slot, when its requests in flight finish
	for i, s := range speeds {
		slots[i] = Slot{Batch: batch, Throughput: s}
		ends = append(ends, nil)
	}
	served := make([]int, len(speeds))
	queue := waiting(make([]string, n)...)
	now := 0.0
	var grants []Grant
	for len(queue) > 0 {
		grants = Pull(queue, slots, PullView{}, grants[:0])
		for _, g := range grants {
			ends[g.Slot] = append(ends[g.Slot], now+float64(batch)/speeds[g.Slot])
			served[g.Slot]++
		}
		queue = queue[len(grants):]
		// Advance to the next finish.
		si, ei := -1, -1
		for i, es := range ends {
			for j, e := range es {
				if si < 0 || e < ends[si][ei] {
					si, ei = i, j
				}
			}
		}
		if si < 0 {
			break
		}
		now = ends[si][ei]
		ends[si] = slices.Delete(ends[si], ei, ei+1)
		slots[si].InFlight--
	}
	return served
}
