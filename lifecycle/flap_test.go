package lifecycle

import (
	"strings"
	"testing"
	"time"
)

// A scale-down that a scale-up undoes within a minute, with misses in
// between, holds the pool at the count it started from
// (scheduler.FlapGuard): the next drop of the rate removes nothing until
// the hold ends. Undone without misses, it holds nothing.
func TestHarmfulFlapHoldsThePool(t *testing.T) {
	tests := []struct {
		name     string
		missPerK uint64 // misses per 1000 requests between the down and the up
		held     bool
	}{
		{"misses between the down and the up: held", 50, true},
		{"none: the next drop scales down as before", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 4), nil, Options{Profiles: builtinStore(t)})
			spec := rnSpec()
			if _, err := c.Deploy(spec, t0); err != nil {
				t.Fatal(err)
			}
			key := spec.Deployment.Namespace + "/" + spec.Deployment.Service
			fn := c.functions[key]
			l := Load{}
			now := steady(c, key, &l, 600, 60)
			// run ticks at perSecond until done says so, within limit.
			run := func(perSecond, missPerK uint64, limit time.Duration, done func() bool) bool {
				for end := now.Add(limit); now.Before(end); {
					now = now.Add(time.Second)
					l.SLOServed += perSecond
					l.SLOMissed += perSecond * missPerK / 1000
					tickWith(c, key, &l, perSecond, now)
					readyAll(c, now)
					if done() {
						return true
					}
				}
				return false
			}
			high := c.serving(fn)
			if !run(100, 0, 3*time.Minute, func() bool { return c.serving(fn) < high }) {
				t.Fatalf("no scale-down from %d replicas at a sixth of the rate", high)
			}
			down := c.serving(fn)
			if !run(600, tt.missPerK, time.Minute, func() bool { return c.serving(fn) > down }) {
				t.Fatalf("no scale-up from %d replicas within a minute of the rate's return", down)
			}
			if got := strings.Contains(fn.lastScale, "undoes a scale-down that cost misses"); got != tt.held {
				t.Errorf("scale-up's reason %q: tells a hold %v, want %v", fn.lastScale, got, tt.held)
			}
			if floor := fn.flap.Floor(now); tt.held && floor != high || !tt.held && floor != 0 {
				t.Errorf("held at %d, want %d (held: %v)", floor, high, tt.held)
			}
			// The rate drops again: held, nothing goes for the hold's two
			// minutes; then the drop is followed.
			droppedWithin := func(limit time.Duration) bool {
				return run(100, 0, limit, func() bool { return c.serving(fn) < high })
			}
			if got := droppedWithin(100 * time.Second); got == tt.held {
				t.Errorf("scaled down within 100 s of the second drop: %v, want %v", got, !tt.held)
			}
			if tt.held && !droppedWithin(2*time.Minute) {
				t.Errorf("still %d replicas two minutes after the hold; want a scale-down", c.serving(fn))
			}
		})
	}
}
