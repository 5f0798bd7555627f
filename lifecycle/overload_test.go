package lifecycle

import (
	"slices"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// A GPU full of one overloaded function's small slices, none of which
// alone frees the room another overloaded function's efficient replica
// waits for: in one tick as many of them yield as make its room, their
// function keeping the rest, and the waiting one is placed first.
func TestSmallSlicesYieldTogether(t *testing.T) {
	tests := []struct {
		name     string
		smallSM  int // each of b's 9 replicas
		need     int // SM % a's waiting replica asks
		yielding int
	}{
		{"one makes the room", 10, 20, 1}, // 10 % free + 10
		{"two together", 10, 30, 2},       // 10 % free + 2 × 10
		{"four together", 10, 50, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{})
			if _, err := c.Deploy(fn("b", tt.smallSM, 1, 9, 9), t0); err != nil {
				t.Fatal(err)
			}
			for id := range c.replicas {
				c.ReplicaReady(id, t0)
			}
			if _, err := c.Deploy(fn("a", tt.need, 1, 1, 1), t0); err != nil {
				t.Fatal(err)
			}
			a, b := c.functions[Key("openfaas-fn", "a")], c.functions[Key("openfaas-fn", "b")]
			if len(a.live) != 1 || a.live[0].placement != nil || a.live[0].reason == "" {
				t.Fatalf("a's replica should wait for room: %+v", a.live)
			}
			// Full-batch throughput per SM %: b's 1, a's 10.
			for _, r := range b.live {
				r.config = scheduler.SliceConfig{SMPercent: tt.smallSM, Batch: 1, Throughput: float64(tt.smallSM)}
			}
			a.live[0].config = scheduler.SliceConfig{SMPercent: tt.need, Batch: 8, Throughput: float64(10 * tt.need)}
			var res Result
			c.yieldToEfficient(map[string]bool{a.key: true, b.key: true}, t0, &res)
			var yielded int
			for _, e := range res.Effects {
				if e.Kind == Demote && strings.HasPrefix(e.Why, "overload: yields its room to "+a.live[0].id) {
					yielded++
				}
			}
			if yielded != tt.yielding {
				t.Fatalf("%d of b's replicas yielded, want %d (%q)", yielded, tt.yielding, kinds(res))
			}
			if got := c.serving(b); got != 9-tt.yielding {
				t.Errorf("b serves %d, want %d", got, 9-tt.yielding)
			}
			res = c.Tick(t0)
			if !slices.Contains(kinds(res), "start openfaas-fn/a "+a.live[0].id) {
				t.Errorf("a's replica not placed in the room made for it: %q", kinds(res))
			}
		})
	}
}
