package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// A function's first replica gets the smallest slice, before its load is
// known. The first scale-up replaces it with a pool sized for the load
// instead of adding beside it (scheduler.RestartWithin): a ready one
// make-before-break, one still starting within RestartWithin at once; one
// starting for longer is left to finish. What replaces it is sized, so a
// later scale-up adds beside it.
func TestFirstScaleUpReplacesUnsized(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name string
		// ready: the first replica is ready before the load comes; else
		// it is still starting when the load comes at loadAt.
		ready  bool
		loadAt time.Duration
		// stopped: the first replica is stopped at the scale-up;
		// replaced: it is retired once its replacement is ready; neither:
		// kept, and the scale-up adds beside it.
		stopped, replaced bool
	}{
		{"ready", true, time.Second, false, true},
		{"starting, placed a second ago", false, time.Second, true, false},
		{"starting for longer than RestartWithin", false, 6 * time.Second, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{Profiles: store})
			if _, err := c.Deploy(rnSpec(), t0); err != nil {
				t.Fatal(err)
			}
			if tt.ready {
				readyAll(c, t0)
			}
			before, _ := c.Function(rnKey)
			first := before.Live[0]
			l := Load{}
			now := t0.Add(tt.loadAt - time.Second)
			c.ObserveLoad(rnKey, l)
			c.Tick(now)
			now = now.Add(time.Second)
			res := tickWith(c, rnKey, &l, 300, now)
			if len(res.Scaled) != 1 {
				t.Fatalf("scaled %+v, want one scale-up at 300 req/s", res.Scaled)
			}
			stopped := slices.ContainsFunc(res.Effects, func(e Effect) bool { return e.Kind == Stop && e.Replica.ID == first.ID })
			if stopped != tt.stopped {
				t.Errorf("first replica stopped %v, want %v: %q", stopped, tt.stopped, kinds(res))
			}
			if tt.stopped || tt.replaced {
				if !strings.Contains(res.Scaled[0].Reason, "sized before the load was known") {
					t.Errorf("reason %q does not say it replaces the first replica", res.Scaled[0].Reason)
				}
			}
			readyAll(c, now)
			after, _ := c.Function(rnKey)
			kept := slices.ContainsFunc(after.Live, func(r ReplicaView) bool { return r.ID == first.ID })
			if kept == (tt.stopped || tt.replaced) {
				t.Errorf("first replica in service after the scale-up: %v, want %v (live %+v)", kept, !(tt.stopped || tt.replaced), after.Live)
			}
			// The replicas the scale-up started are sized for the load: a
			// further rise adds beside them and retires none of them.
			sized := map[string]bool{}
			for _, r := range after.Live {
				if r.ID != first.ID {
					sized[r.ID] = true
				}
			}
			for range 3 {
				now = now.Add(time.Second)
				res = tickWith(c, rnKey, &l, 600, now)
				for _, e := range res.Effects {
					if (e.Kind == Stop || e.Kind == Demote) && sized[e.Replica.ID] {
						t.Errorf("a later scale-up retired %s, sized for the load: %q", e.Replica.ID, kinds(res))
					}
				}
				readyAll(c, now)
			}
			if got, _ := c.Function(rnKey); len(got.Live) <= len(sized) {
				t.Errorf("%d replicas at 600 req/s, %d sized at 300: want more", len(got.Live), len(sized))
			}
		})
	}
}
