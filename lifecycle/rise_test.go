package lifecycle

import (
	"cmp"
	"strings"
	"testing"
	"time"
)

// Rise, the pass between ticks, answers a rise that its replicas do not
// serve, and nothing else: at a steady rate or a fall it changes nothing,
// and it never removes a replica.
func TestRiseAnswersARiseBetweenTicks(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name string
		// requests in the interval (250 ms unless given) after 30 s at
		// 120 req/s
		next  uint64
		after time.Duration
		added bool
	}{
		{"steady 120 req/s", 30, 0, false},
		{"a fall to nothing", 0, 0, false},
		// A tick would scale down here: the pass must not.
		{"a minute with no request", 0, time.Minute, false},
		{"a burst to 300 req/s", 75, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{Profiles: store})
			spec := rnSpec()
			if _, err := c.Deploy(spec, t0); err != nil {
				t.Fatal(err)
			}
			key := rnKey
			l := Load{}
			now := steady(c, key, &l, 120, 30)
			before, _ := c.Function(key)
			l.Requests += tt.next
			c.ObserveLoad(key, l)
			dt := cmp.Or(tt.after, 250*time.Millisecond)
			res := c.Rise(now.Add(dt))
			after, _ := c.Function(key)
			starts := 0 // a new replica or a standby promoted
			for _, e := range res.Effects {
				if e.Kind == Start || e.Kind == Promote {
					starts++
				}
				if e.Kind == Stop || e.Kind == Demote {
					t.Errorf("Rise retired a replica: %q", kinds(res))
				}
			}
			if got := len(after.Live) > len(before.Live); got != tt.added || (starts > 0) != tt.added {
				t.Fatalf("%d replicas -> %d, %d started or promoted (%q), want added %v", len(before.Live), len(after.Live), starts, kinds(res), tt.added)
			}
			if !tt.added && len(res.Effects) != 0 {
				t.Errorf("a Rise that found no rise had effects: %q", kinds(res))
			}
			if tt.added && (len(res.Scaled) != 1 || !strings.Contains(res.Scaled[0].Reason, "> capacity")) {
				t.Errorf("scaled %+v, want one scale-up with its reason", res.Scaled)
			}
		})
	}
}

// A resize is a scale-down of the replicas it replaces, so the core asks
// for it at the rate a rise points at, as the autoscaler plans, not at
// the smoothed rate alone, which lags a rise (h16 seed 16 lost two of a
// burst's four replicas to a merge judged at 96 of its 180 req/s). A
// pool sized for 300 req/s of resnet50 is resized at a smoothed 20
// req/s, and not where the last interval rose back to 300.
func TestNoResizeWithinARise(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name    string
		rising  float64
		resized bool
	}{
		{"the load fell: resized", 20, true},
		{"a rise back to it: kept", 300, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _, now := steadyRN(t, store, 1, 300, 60)
			now = now.Add(time.Minute) // past every cool-down
			fn := c.functions[rnKey]
			fn.lastRequest = now
			in := c.autoscaleInput(fn, now, 20, tt.rising)
			c.begin()
			var res Result
			c.resize(fn, in, now, &res)
			if got := len(res.Scaled) > 0; got != tt.resized {
				t.Errorf("resized at 20 req/s, rising %.0f: %v (%+v), want %v", tt.rising, got, res.Scaled, tt.resized)
			}
		})
	}
}
