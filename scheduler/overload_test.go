package scheduler

import (
	"slices"
	"testing"
	"time"
)

func TestYield(t *testing.T) {
	// Efficiency is throughput per cost: eff 10 (fast) against 2 (slow)
	// and 2.5 (small, a slice too small alone to make a fast one's room).
	fast := SliceConfig{SMPercent: 20, Batch: 8, Throughput: 200}
	slow := SliceConfig{SMPercent: 50, Batch: 4, Throughput: 100}
	small := SliceConfig{SMPercent: 10, Batch: 1, Throughput: 25}
	pend := func(id, fn string, c SliceConfig, serving int) YieldCandidate {
		return YieldCandidate{ID: id, Function: fn, Config: c, Cost: float64(c.SMPercent), Serving: serving}
	}
	// live is a replica in service on gpu, which has free SM % besides.
	live := func(id, fn string, c SliceConfig, spare bool, gpu string, free int) YieldCandidate {
		return YieldCandidate{ID: id, Function: fn, Config: c, Cost: float64(c.SMPercent), Spare: spare,
			GPU: gpu, Held: c.SMPercent, Room: free + c.SMPercent}
	}
	tests := []struct {
		name          string
		pending, live []YieldCandidate
		victims       []string
		to            string
	}{
		{"the least efficient yields to the most efficient",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, "g1", 0), live("v2", "a", fast, true, "g2", 0)}, []string{"v1"}, "p1"},
		{"a function keeps its last replica",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, false, "g1", 0)}, nil, ""},
		{"never to a replica of its own function",
			[]YieldCandidate{pend("p1", "b", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, "g1", 0)}, nil, ""},
		{"a yield must make room for it",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", small, true, "g1", 5)}, nil, ""},
		{"within the margin, nothing moves",
			[]YieldCandidate{pend("p1", "a", SliceConfig{SMPercent: 20, Batch: 8, Throughput: 45}, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, "g1", 0)}, nil, ""},
		{"among equals, the function with fewest in service gets the room",
			[]YieldCandidate{pend("p1", "a", fast, 3), pend("p2", "c", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, "g1", 0)}, []string{"v1"}, "p2"},
		{"nothing waits", nil, []YieldCandidate{live("v1", "b", slow, true, "g1", 0)}, nil, ""},
		// Issue 12's throughput run after the least-cost scale-ups: the
		// GPUs full of small slices, none of which alone frees a fast one's
		// room.
		{"small slices on one GPU yield together",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", small, true, "g1", 0), live("v2", "b", small, true, "g1", 0),
				live("v3", "b", small, true, "g1", 0)}, []string{"v1", "v2"}, "p1"},
		{"a GPU's free SM % counts towards the room",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", small, true, "g1", 10), live("v2", "b", small, true, "g1", 10)}, []string{"v1"}, "p1"},
		{"one replica that makes the room rather than several",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", small, true, "g1", 0), live("v2", "b", small, true, "g1", 0),
				live("v3", "c", slow, true, "g2", 0), live("v4", "c", slow, true, "g2", 0)}, []string{"v3"}, "p1"},
		{"slices on different GPUs do not add up",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", small, true, "g1", 0), live("v2", "b", small, true, "g2", 0)}, nil, ""},
		{"together, a function still keeps one",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", small, true, "g1", 0), live("v2", "b", small, true, "g1", 0)}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			victims, to, ok := Yield(tt.pending, tt.live)
			if !slices.Equal(victims, tt.victims) || to != tt.to || ok != (tt.victims != nil) {
				t.Errorf("Yield = %q to %q, %v; want %q to %q", victims, to, ok, tt.victims, tt.to)
			}
		})
	}
}

func TestOverloaded(t *testing.T) {
	c := SliceConfig{SMPercent: 20, Batch: 4, Throughput: 100}
	in := func(backlog float64, slo time.Duration) AutoscaleInput {
		return AutoscaleInput{Backlog: backlog, SLO: slo, Replicas: []ReplicaCapacity{{ID: "a", Config: c}}}
	}
	capacity := QueueCapacity(c, time.Second, DefaultSLOQuantile)
	tests := []struct {
		name string
		in   AutoscaleInput
		want bool
	}{
		{"a backlog the replicas drain within the drain time", in(capacity*4, time.Second), false},
		{"a backlog that alone outruns them", in(capacity*6, time.Second), true},
		{"no SLO: never", in(1e6, 0), false},
		{"no backlog", in(0, time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Overloaded(tt.in, AutoscaleOptions{}); got != tt.want {
				t.Errorf("Overloaded = %v, want %v", got, tt.want)
			}
		})
	}
}
