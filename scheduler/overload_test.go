package scheduler

import (
	"testing"
	"time"
)

func TestYield(t *testing.T) {
	// Efficiency is throughput per cost: eff 10 (fast) against 2 (slow).
	fast := SliceConfig{SMPercent: 20, Batch: 8, Throughput: 200}
	slow := SliceConfig{SMPercent: 50, Batch: 4, Throughput: 100}
	pend := func(id, fn string, c SliceConfig, serving int) YieldCandidate {
		return YieldCandidate{ID: id, Function: fn, Config: c, Cost: float64(c.SMPercent), Serving: serving}
	}
	live := func(id, fn string, c SliceConfig, spare bool, room int) YieldCandidate {
		return YieldCandidate{ID: id, Function: fn, Config: c, Cost: float64(c.SMPercent), Spare: spare, Room: room}
	}
	tests := []struct {
		name          string
		pending, live []YieldCandidate
		victim, to    string
	}{
		{"the least efficient yields to the most efficient",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, 50), live("v2", "a", fast, true, 20)}, "v1", "p1"},
		{"a function keeps its last replica",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, false, 50)}, "", ""},
		{"never to a replica of its own function",
			[]YieldCandidate{pend("p1", "b", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, 50)}, "", ""},
		{"a yield must make room for it",
			[]YieldCandidate{pend("p1", "a", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, 15)}, "", ""},
		{"within the margin, nothing moves",
			[]YieldCandidate{pend("p1", "a", SliceConfig{SMPercent: 20, Batch: 8, Throughput: 45}, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, 50)}, "", ""},
		{"among equals, the function with fewest in service gets the room",
			[]YieldCandidate{pend("p1", "a", fast, 3), pend("p2", "c", fast, 1)},
			[]YieldCandidate{live("v1", "b", slow, true, 50)}, "v1", "p2"},
		{"nothing waits", nil, []YieldCandidate{live("v1", "b", slow, true, 50)}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			victim, to, ok := Yield(tt.pending, tt.live)
			if victim != tt.victim || to != tt.to || ok != (tt.victim != "") {
				t.Errorf("Yield = %q to %q, %v; want %q to %q", victim, to, ok, tt.victim, tt.to)
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
