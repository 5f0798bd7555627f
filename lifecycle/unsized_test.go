package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
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

// Where the first scale-up's replacement of a ready unsized replica finds
// no room on a GPU in use while another function's replacement is on its
// way, it waits up to scheduler.RestartWithin for the room that one frees
// there before it opens a GPU, its old replica serving meanwhile: two
// functions whose replacements do not fit beside their first replicas
// together fit one after the other. With no room freed within the wait,
// it opens the other GPU once the wait is over, not before. Where the
// load rises while it waits, it is sized afresh rather than joined by an
// add beside it, and waits no longer than it had to.
func TestFirstScaleUpWaitsForRoomOnAGPUInUse(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name string
		// ready: the first function's replacement is ready this long
		// after the scale-up (its first replica retiring); 0: never.
		ready time.Duration
		// want: the GPU the second function's replacement starts on,
		// when.
		want   string
		wantAt time.Duration
		// b, rise: b's requests a second, then from the second after
		// the scale-up (0: as before). a's are 300.
		b, rise uint64
	}{
		{"room freed within the wait", 2 * time.Second, "GPU-0-0", 2 * time.Second, 300, 0},
		{"no room freed", 0, "GPU-0-1", scheduler.RestartWithin, 300, 0},
		// One slice still carries b's new load.
		{"b's load up while it waits", 2 * time.Second, "GPU-0-0", 2 * time.Second, 150, 280},
		{"b's load up while it waits, no room freed", 0, "GPU-0-1", scheduler.RestartWithin, 150, 280},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 2), nil, Options{Profiles: store})
			// The filler leaves the first GPU room for one replica more
			// than a's and b's first ones.
			if _, err := c.Deploy(fn("filler", 10, 10, 1, 1), t0); err != nil {
				t.Fatal(err)
			}
			keys := []string{"openfaas-fn/a", "openfaas-fn/b"}
			for _, name := range []string{"a", "b"} {
				spec := rnSpec()
				spec.Deployment.Service = name
				spec.GPU.MemoryBytes = 2 << 30
				if _, err := c.Deploy(spec, t0); err != nil {
					t.Fatal(err)
				}
			}
			readyAll(c, t0)
			var first []ReplicaView
			for _, k := range keys {
				v, _ := c.Function(k)
				if g := v.Live[0].Placement.GPUs[0]; g != "GPU-0-0" {
					t.Fatalf("%s's first replica on %s, want GPU-0-0 beside the filler", k, g)
				}
				first = append(first, v.Live[0])
			}
			loads := make([]Load, 2)
			rate := []uint64{300, tt.b}
			tick := func(now time.Time) Result {
				for i, k := range keys {
					loads[i].Requests += rate[i]
					loads[i].LastRequest = now
					c.ObserveLoad(k, loads[i])
				}
				return c.Tick(now)
			}
			var up time.Time
			var res Result
			for s := 1; s <= 5 && up.IsZero(); s++ {
				now := t0.Add(time.Duration(s) * time.Second)
				if res = tick(now); len(res.Scaled) > 0 {
					if len(res.Scaled) != 2 || !strings.Contains(res.Scaled[1].Reason, "sized before the load was known") {
						t.Fatalf("scaled %+v, want both first replicas replaced", res.Scaled)
					}
					up = now
				}
			}
			if up.IsZero() {
				t.Fatal("no scale-up at 300 req/s")
			}
			waiting := func() (n int, cfg scheduler.SliceConfig) {
				for _, r := range c.replicas {
					if r.fn == keys[1] && r.replacing() && r.placement == nil {
						n, cfg = n+1, r.config
					}
				}
				return n, cfg
			}
			n, sized := waiting()
			if n != 1 {
				t.Fatalf("%d replacements of b waiting for room, want 1", n)
			}
			if tt.rise > 0 {
				rate[1] = tt.rise
			}
			gpu, at := "", time.Duration(0)
			for now := up; gpu == "" && now.Sub(up) <= 2*scheduler.RestartWithin; now = now.Add(time.Second) {
				if now.After(up) {
					res = Result{}
					if tt.ready > 0 && now.Sub(up) == tt.ready {
						for _, r := range c.replicas {
							if r.fn == keys[0] && r.replacing() {
								res = c.ReplicaReady(r.id, now)
							}
						}
					}
					res.Effects = append(res.Effects, tick(now).Effects...)
				}
				if tt.rise > 0 && gpu == "" {
					if v, _ := c.Function(keys[1]); len(v.Live) != 2 {
						t.Errorf("+%s: b has %d replicas, want its first and the replacement: an add beside a replacement that waits", now.Sub(up), len(v.Live))
					}
					if n, cfg := waiting(); n == 1 && now.Sub(up) == time.Second && cfg == sized {
						t.Errorf("+1s: b's waiting replacement still %d %% SM batch %d, sized for the rate before the rise", cfg.SMPercent, cfg.Batch)
					}
				}
				for _, e := range res.Effects {
					if e.Kind == Start && e.Function == keys[1] {
						gpu, at = e.Replica.Placement.GPUs[0], now.Sub(up)
					}
					if (e.Kind == Stop || e.Kind == Demote) && e.Replica.ID == first[1].ID {
						t.Errorf("b's first replica retired at +%s before its replacement started", now.Sub(up))
					}
				}
			}
			if gpu != tt.want || at != tt.wantAt {
				t.Errorf("b's replacement started on %q at +%s, want %s at +%s", gpu, at, tt.want, tt.wantAt)
			}
		})
	}
}
