package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// A multi-model function's scale-down that a scale-up undoes within a
// minute, with misses in between, holds its pool at the count it started
// from (scheduler.FlapGuard): the next drop of the rate removes nothing
// until the hold ends. Undone without misses, it holds nothing; nor does
// a single-model function's, whose warm replica comes back with its
// model (docs/scheduling.md §4).
func TestHarmfulFlapHoldsThePool(t *testing.T) {
	zoo := scheduler.Function{
		Deployment: types.FunctionDeployment{Service: "zoo", Namespace: "openfaas-fn", Image: "x"},
		GPU:        gpu.Request{Model: "alexnet", SLO: 300 * time.Millisecond, MemoryBytes: 2 << 30},
		Scale:      scheduler.ScalePolicy{Min: 1, Max: 20},
	}
	mix := map[string]uint64{"alexnet": 2, "resnet50": 4, "densenet201": 4} // tenths
	tests := []struct {
		name     string
		spec     scheduler.Function
		mix      map[string]uint64
		high     uint64 // req/s
		missPerK uint64 // misses per 1000 requests between the down and the up
		held     bool
	}{
		{"multi-model, misses between the down and the up: held", zoo, mix, 400, 50, true},
		{"multi-model, none: the next drop scales down as before", zoo, mix, 400, 0, false},
		{"single-model, misses: not held", rnSpec(), nil, 600, 50, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 8), nil, Options{Profiles: builtinStore(t)})
			if _, err := c.Deploy(tt.spec, t0); err != nil {
				t.Fatal(err)
			}
			key := Key(tt.spec.Deployment.Namespace, tt.spec.Deployment.Service)
			fn := c.functions[key]
			l := Load{}
			if tt.mix != nil {
				l.Models = map[string]uint64{}
			}
			now := t0
			// run ticks at perSecond until done says so, within limit.
			run := func(perSecond, missPerK uint64, limit time.Duration, done func() bool) bool {
				for end := now.Add(limit); now.Before(end); {
					now = now.Add(time.Second)
					for m, tenths := range tt.mix {
						l.Models[m] += perSecond * tenths / 10
					}
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
			run(tt.high, 0, time.Minute, func() bool { return false })
			high := c.serving(fn)
			if high < 2 {
				t.Fatalf("%d replicas at %d req/s, want several", high, tt.high)
			}
			if !run(tt.high/6, 0, 3*time.Minute, func() bool { return c.serving(fn) < high }) {
				t.Fatalf("no scale-down from %d replicas at a sixth of the rate", high)
			}
			down := c.serving(fn)
			if !run(tt.high, tt.missPerK, time.Minute, func() bool { return c.serving(fn) > down }) {
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
				return run(tt.high/6, 0, limit, func() bool { return c.serving(fn) < high })
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
