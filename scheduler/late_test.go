package scheduler

import (
	"slices"
	"testing"
	"time"
)

func TestLateAfter(t *testing.T) {
	tests := []struct {
		name   string
		slo    time.Duration
		slots  []Slot
		after  time.Duration
		isLate bool
	}{
		{"no SLO", 0, []Slot{{Batch: 4, Throughput: 100}}, 0, false},
		{"no replica", time.Second, nil, 0, false},
		{"only unknown slices", time.Second, []Slot{{InFlight: 3}}, 0, false},
		{"the SLO less a full batch", time.Second, []Slot{{Batch: 4, Throughput: 100}}, 960 * time.Millisecond, true},
		// The fastest batch, not the fastest rate: 8 at 400/s takes 20 ms,
		// 1 at 100/s 10 ms.
		{"the fastest batch of several", 100 * time.Millisecond, []Slot{{Batch: 8, Throughput: 400}, {Batch: 1, Throughput: 100}, {}},
			90 * time.Millisecond, true},
		{"in flight does not matter", 100 * time.Millisecond, []Slot{{InFlight: 8, Batch: 8, Throughput: 400}},
			80 * time.Millisecond, true},
		{"a batch as long as the SLO: none told apart", 20 * time.Millisecond, []Slot{{Batch: 2, Throughput: 100}}, 0, false},
		{"a batch longer than the SLO: none told apart", 10 * time.Millisecond, []Slot{{Batch: 2, Throughput: 100}}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after, ok := LateAfter(tt.slo, tt.slots)
			if after != tt.after || ok != tt.isLate {
				t.Errorf("LateAfter(%v, %v) = %v, %v; want %v, %v", tt.slo, tt.slots, after, ok, tt.after, tt.isLate)
			}
		})
	}
}

func TestLateLast(t *testing.T) {
	queue := []Waiting{{Seq: 1, Model: "a"}, {Seq: 2, Model: "b"}, {Seq: 3, Model: "a"}, {Seq: 4}}
	tests := []struct {
		name        string
		late, limit int
		want        []uint64 // Seq, in the order offered
	}{
		{"none late: arrival order", 0, 10, []uint64{1, 2, 3, 4}},
		{"the two oldest late: after the others", 2, 10, []uint64{3, 4, 1, 2}},
		{"all late: arrival order", 4, 10, []uint64{1, 2, 3, 4}},
		{"a head of three: on-time first", 1, 3, []uint64{2, 3, 4}},
		{"a head shorter than the on-time: no late one", 2, 1, []uint64{3}},
		{"more late than queued: all of it", 9, 10, []uint64{1, 2, 3, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ordered, order := LateLast(queue, tt.late, tt.limit, nil, nil)
			var got []uint64
			for i, w := range ordered {
				got = append(got, w.Seq)
				if queue[order[i]] != w {
					t.Errorf("place %d maps to queue[%d] = %v, holds %v", i, order[i], queue[order[i]], w)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("LateLast(late %d, limit %d) = %v, want %v", tt.late, tt.limit, got, tt.want)
			}
		})
	}
}
