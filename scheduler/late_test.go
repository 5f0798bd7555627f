package scheduler

import (
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
