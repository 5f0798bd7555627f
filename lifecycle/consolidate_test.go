package lifecycle

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// consolidationCore has a (60 % SM) on GPU-0-0 and b (30 %) alone on
// GPU-0-1, where it went while x filled GPU-0-0; x is gone, so b fits
// beside a and GPU-0-1 can be freed.
func consolidationCore(t *testing.T, opts Options) *Core {
	t.Helper()
	c := New(inventory(1, 2), nil, opts)
	for _, f := range []struct {
		name string
		sm   int
	}{{"a", 60}, {"x", 40}, {"b", 30}} {
		if _, err := c.Deploy(fn(f.name, f.sm, 2, 1, 1), t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Delete("openfaas-fn", "x", t0); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a-1", "b-3"} {
		c.ReplicaReady(id, t0)
	}
	if v, _ := c.Replica("b-3"); v.Placement.GPUs[0] != "GPU-0-1" {
		t.Fatalf("b is on %v, want GPU-0-1", v.Placement.GPUs)
	}
	return c
}

// effectsAbout lists res's Start, Stop and Demote effects as "kind
// replica" with the GPU a Start takes.
func effectsAbout(res Result) []string {
	var out []string
	for _, e := range res.Effects {
		switch e.Kind {
		case Start:
			out = append(out, "start "+e.Replica.ID+" on "+e.Replica.Placement.GPUs[0])
		case Stop, Demote:
			out = append(out, string(e.Kind)+" "+e.Replica.ID)
		}
	}
	return out
}

func TestConsolidationMovesMakeBeforeBreak(t *testing.T) {
	type step struct {
		at    time.Duration
		ready string // a replica that answers before this tick
		gone  string // a replica lost before this tick
		want  []string
	}
	tests := []struct {
		name  string
		opts  Options
		steps []step
		// live is b's replicas in service at the end.
		live []string
	}{
		{"moved: the old replica retires once the new one is ready, then yields", Options{}, []step{
			{at: 30 * time.Second, want: nil}, // within the cool-down of the deploys
			{at: 2 * time.Minute, want: []string{"start b-4 on GPU-0-0"}},
			{at: 2*time.Minute + time.Second, want: nil}, // not ready: b-3 serves on
			{at: 2*time.Minute + 2*time.Second, ready: "b-4", want: []string{"demote b-3"}},
			{at: 2*time.Minute + 3*time.Second, want: []string{"stop b-3"}},
		}, []string{"b-4"}},
		{"without warm replicas the old one stops at once", Options{NoWarm: true}, []step{
			{at: 2 * time.Minute, want: []string{"start b-4 on GPU-0-0"}},
			{at: 2*time.Minute + time.Second, ready: "b-4", want: []string{"stop b-3"}},
		}, []string{"b-4"}},
		{"the new replica lost before ready: the old one stays, and no other takes its place", Options{}, []step{
			{at: 2 * time.Minute, want: []string{"start b-4 on GPU-0-0"}},
			{at: 2*time.Minute + time.Second, gone: "b-4", want: nil},
			{at: 2*time.Minute + 30*time.Second, want: nil}, // the cool-down after a move
		}, []string{"b-3"}},
		{"off", Options{NoConsolidate: true}, []step{
			{at: 2 * time.Minute, want: nil},
		}, []string{"b-3"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := consolidationCore(t, tc.opts)
			for _, s := range tc.steps {
				now := t0.Add(s.at)
				var got []string
				if s.ready != "" {
					// A replacement ready retires what it replaces then.
					got = effectsAbout(c.ReplicaReady(s.ready, now))
				}
				if s.gone != "" {
					if got := effectsAbout(c.ReplicaGone(s.gone, now)); len(got) > 0 {
						t.Fatalf("at %s, %s gone: %q, want nothing", s.at, s.gone, got)
					}
				}
				if got = append(got, effectsAbout(c.Tick(now))...); !slices.Equal(got, s.want) {
					t.Fatalf("at %s: %q, want %q", s.at, got, s.want)
				}
				// The pair counts once.
				if v, _ := c.Function("openfaas-fn/b"); v.Desired != 1 {
					t.Fatalf("at %s: b desires %d replicas, want 1", s.at, v.Desired)
				}
			}
			v, _ := c.Function("openfaas-fn/b")
			var live []string
			for _, r := range v.Live {
				live = append(live, r.ID)
			}
			if !slices.Equal(live, tc.live) {
				t.Errorf("b's replicas in service: %q, want %q", live, tc.live)
			}
			if tc.live[0] == "b-4" {
				for _, u := range c.Usage() {
					if u.Device.UUID == "GPU-0-1" && len(u.Replicas) > 0 {
						t.Errorf("GPU-0-1 still holds %v", u.Replicas)
					}
				}
			}
		})
	}
}

// A warm replica whose memory blocks a move is evicted by it, and where
// stops are confirmed the move waits for it to drain. One consolidation
// holds (fixed: here, its function has none in service) keeps its memory:
// the move does not happen (scheduler.Consolidate).
func TestConsolidationEvictsWarmOnTarget(t *testing.T) {
	type deploy struct {
		name   string
		sm     int
		mem    int64
		n, max int
	}
	tests := []struct {
		name string
		// The deploys, in order: a and w (scaled to wFrom) fill GPU-0-0's
		// memory, then b, which finds no room for its memory there, is
		// alone on GPU-0-1.
		deploys    []deploy
		wFrom, wTo int // w scaled to wFrom at its deploy, to wTo at t0: one of its replicas goes warm
		want       []string
	}{
		{"w serves on: its warm replica is evicted, then b moves",
			[]deploy{{"a", 50, 3, 1, 1}, {"w", 10, 6, 1, 2}, {"b", 30, 2, 1, 1}}, 2, 1,
			[]string{"w-3: warm replica evicted", "b-4"}},
		{"w scaled to zero: its warm replica is held, b stays",
			[]deploy{{"a", 50, 2, 1, 1}, {"w", 10, 13, 1, 1}, {"b", 30, 2, 1, 1}}, 1, 0,
			nil},
	}
	for _, tc := range tests {
		for _, confirm := range []bool{false, true} {
			c := New(inventory(1, 2), nil, Options{ConfirmStops: confirm})
			var started []string
			for _, f := range tc.deploys {
				res, err := c.Deploy(fn(f.name, f.sm, f.mem, f.n, f.max), t0)
				if err != nil {
					t.Fatal(err)
				}
				if f.name == "w" {
					scaled, _, err := c.Scale("openfaas-fn", "w", tc.wFrom, t0)
					if err != nil {
						t.Fatal(err)
					}
					res.Effects = append(res.Effects, scaled.Effects...)
				}
				for _, e := range res.Effects {
					if e.Kind == Start {
						started = append(started, e.Replica.ID)
					}
				}
			}
			for _, id := range started {
				c.ReplicaReady(id, t0)
			}
			if _, _, err := c.Scale("openfaas-fn", "w", tc.wTo, t0); err != nil {
				t.Fatal(err)
			}
			var stops []string
			var carry func(res Result, now time.Time)
			carry = func(res Result, now time.Time) {
				for _, e := range res.Effects {
					switch e.Kind {
					case Stop:
						stops = append(stops, e.Replica.ID+": "+e.Why)
						if confirm {
							carry(c.ReplicaGone(e.Replica.ID, now), now)
						}
					case Start:
						carry(c.ReplicaReady(e.Replica.ID, now), now)
					}
				}
			}
			for i := 0; i < 5; i++ {
				// Past the deploys' cool-down, before the warm replica's
				// lifetime on its crowded GPU (75 s at 1/16 free,
				// scheduler.WarmLifetime).
				now := t0.Add(61*time.Second + time.Duration(i)*time.Second)
				carry(c.Tick(now), now)
			}
			ok := len(stops) == len(tc.want)
			for i := 0; ok && i < len(stops); i++ {
				ok = strings.HasPrefix(stops[i], tc.want[i])
			}
			if !ok {
				t.Errorf("%s, confirm stops %v: stops %q, want %q", tc.name, confirm, stops, tc.want)
			}
		}
	}
}

// A GPU left holding only warm replicas is freed by consolidation — they
// yield — unless one is just made or its function has no replica in
// service (a request would then wait out a cold start: its warm lifetime
// alone decides), it is a bursty function's model cache (keepsCache), or
// its function has had a burst and its bursts' period is not yet known
// (RateHistory.Learning: they are all its next burst can count on).
// Seen failing with warm replicas held while their function scaled down:
// the cost run's falling load kept such GPUs; and with a steady
// function's model caches held (h19-zoo8-steady's cost).
func TestWarmOnlyGPUYields(t *testing.T) {
	tests := []struct {
		name   string
		to     int           // f scaled to, at t0 + 90 s
		check  time.Duration // since then
		models bool          // each replica holds several models
		stop   time.Duration // requests (100/s) stop this long before the scale-down; 0: they go on
		yield  bool
		// down: the scale-down this long after the deploy; 0: 90 s,
		// past consolidation's hold of a new function.
		down time.Duration
		// burst: 200 req/s more for 15 s, ending this long before the
		// scale-down; 0: none.
		burst time.Duration
		// bursts: how many such bursts, a minute apart, the last as
		// burst says; 0: one.
		bursts int
	}{
		{"one in service elsewhere: the warm-only GPU is freed", 1, 40 * time.Second, false, 0, true, 0, 0, 0},
		{"its function deployed within the minute, steady: freed", 1, 10 * time.Second, false, 0, true, 35 * time.Second, 0, 0},
		{"its function deployed within the minute, its load fell (bursty): kept", 1, 10 * time.Second, false, 10 * time.Second, false, 35 * time.Second, 0, 0},
		{"just made, its function steady: freed", 1, 10 * time.Second, false, 0, true, 0, 0, 0},
		{"just made, its function's load fell (bursty): kept", 1, 10 * time.Second, false, 10 * time.Second, false, 0, 0, 0},
		{"scaled to zero: kept for its lifetime", 0, 40 * time.Second, false, 10 * time.Second, false, 0, 0, 0},
		{"a bursty function's model cache (several models, load fell): kept", 1, 40 * time.Second, true, 10 * time.Second, false, 0, 0, 0},
		{"a steady function's model cache (several models, load goes on): freed", 1, 40 * time.Second, true, 0, true, 0, 0, 0},
		{"after its first burst, its period not known: kept", 1, 40 * time.Second, false, 0, false, 0, 20 * time.Second, 0},
		{"just made after a burst, its period not known: kept", 1, 10 * time.Second, false, 0, false, 0, 20 * time.Second, 0},
		// Its next burst's capacity starts ahead of it (expectBurst), so
		// the just-made warm replica is not all that burst can count on.
		{"just made after a burst, its bursts' period known: freed", 1, 10 * time.Second, false, 0, true, 250 * time.Second, 20 * time.Second, 4},
		// Its model cache too, between bursts: what starts ahead of the
		// next one loads the mix meanwhile (burstLead).
		{"a bursty function's model cache, its bursts' period known: freed", 1, 10 * time.Second, true, 0, true, 250 * time.Second, 20 * time.Second, 4},
		// But not once that burst is due. Onsets a minute apart, the last
		// about 62 s before the scale-down: the next is due from about
		// 12 s before it. A single-model function's yields (as two rows
		// up): what replaces it waits only a start-up.
		{"a bursty function's model cache, its next burst due: kept", 1, 10 * time.Second, true, 0, false, 250 * time.Second, 50 * time.Second, 4},
		{"one model, its next burst due: freed", 1, 10 * time.Second, false, 0, true, 250 * time.Second, 50 * time.Second, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := twoReady(t)
			if tc.models {
				for _, id := range []string{"f-1", "f-2"} {
					c.cache.Use(id, "m1", 1<<20, t0)
					c.cache.Use(id, "m2", 1<<20, t0)
				}
			}
			down := t0.Add(90 * time.Second)
			if tc.down > 0 {
				down = t0.Add(tc.down)
			}
			end := down.Add(tc.check)
			if tc.stop > 0 {
				end = down.Add(-tc.stop)
			}
			var yields []string
			for now := t0.Add(time.Second); !now.After(down.Add(tc.check)); now = now.Add(time.Second) {
				if now.Equal(down) {
					if _, _, err := c.Scale("openfaas-fn", "f", tc.to, down); err != nil {
						t.Fatal(err)
					}
				}
				last := now
				if last.After(end) {
					last = end
				}
				requests := 100 * last.Sub(t0).Seconds()
				bursts := tc.bursts
				if tc.burst > 0 {
					bursts = max(bursts, 1)
				}
				for i := range bursts {
					to := down.Add(-tc.burst - time.Duration(i)*time.Minute)
					from := to.Add(-15 * time.Second)
					until := to
					if last.Before(to) {
						until = last
					}
					requests += 200 * max(until.Sub(from).Seconds(), 0)
				}
				c.ObserveLoad("openfaas-fn/f", Load{Requests: uint64(requests), LastRequest: last})
				for _, e := range c.Tick(now).Effects {
					if e.Kind == Stop && strings.HasPrefix(e.Why, "consolidation") {
						yields = append(yields, e.Replica.ID)
					}
				}
			}
			if yielded := len(yields) > 0; yielded != tc.yield {
				t.Errorf("yielded: %v, want %v (%q)", yielded, tc.yield, yields)
			}
			// The next expected burst is sized knowing its warm replicas
			// went (expectBurst).
			if at := c.functions["openfaas-fn/f"].yieldedAt; at.IsZero() == tc.yield {
				t.Errorf("yield recorded at %v, want one: %v", at, tc.yield)
			}
		})
	}
}

// A replacement is recorded only once it has taken over, so that a
// restart in between brings back the replica it was to replace alone.
func TestReplacementRecordedOnceItTakesOver(t *testing.T) {
	c := consolidationCore(t, Options{})
	placed := func(res Result) []string {
		var ids []string
		for _, e := range res.Effects {
			if e.Kind == Write && e.Function == "openfaas-fn/b" {
				ids = nil
				for _, p := range e.Record.Placed {
					if !p.Idle {
						ids = append(ids, p.ID)
					}
				}
			}
		}
		return ids
	}
	move := t0.Add(2 * time.Minute)
	res := c.Tick(move)
	if got := placed(res); !slices.Equal(got, []string{"b-3"}) {
		t.Fatalf("record while b-4 starts: %q in service, want b-3 alone", got)
	}
	rec := res.Effects[slices.IndexFunc(res.Effects, func(e Effect) bool { return e.Kind == Write && e.Function == "openfaas-fn/b" })].Record
	r := New(inventory(1, 2), nil, Options{})
	if _, _ = r.Restore([]Record{*rec}, move); r.Live("openfaas-fn/b") != 1 {
		t.Fatalf("restored mid-move: %d replicas of b, want 1", r.Live("openfaas-fn/b"))
	}
	if got := placed(c.ReplicaReady("b-4", move.Add(time.Second))); !slices.Equal(got, []string{"b-4"}) {
		t.Fatalf("record once b-4 took over: %q in service, want b-4", got)
	}
}

// A warm replica on a crowded GPU lives shorter (scheduler.WarmExpired's
// memory pressure), unless it is a bursty function's model cache
// (keepsCache): several models, which a new replica rebuilds one load at
// a time, of a function whose load fell off a peak. A steady function's
// is trimmed capacity and yields as one model's does; seen failing while
// any replica holding several models kept its lifetime.
func TestWarmModelCacheIgnoresMemoryPressure(t *testing.T) {
	tests := []struct {
		name    string
		models  []string
		bursty  bool // requests stop 10 s before the scale-down; else they go on
		expired bool
	}{
		{"one model, steady, 14 of 16 GiB used: expires early", []string{"f"}, false, true},
		{"one model, bursty: expires early", []string{"f"}, true, true},
		{"several models, bursty: its lifetime", []string{"m1", "m2", "m3"}, true, false},
		{"several models, steady: expires early", []string{"m1", "m2", "m3"}, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{WarmTTL: 10 * time.Minute})
			if _, err := c.Deploy(fn("f", 30, 7, 0, 2), t0); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Scale("openfaas-fn", "f", 2, t0); err != nil {
				t.Fatal(err)
			}
			c.ReplicaReady("f-1", t0)
			c.ReplicaReady("f-2", t0)
			for _, m := range tc.models {
				c.cache.Use("f-2", m, 1<<20, t0)
			}
			down := t0.Add(time.Minute)
			end := down.Add(4 * time.Minute)
			if tc.bursty {
				end = down.Add(-10 * time.Second)
			}
			expired := false
			for now := t0.Add(time.Second); !now.After(down.Add(3 * time.Minute)); now = now.Add(time.Second) {
				if now.Equal(down) {
					if _, _, err := c.Scale("openfaas-fn", "f", 1, down); err != nil {
						t.Fatal(err)
					}
				}
				last := now
				if last.After(end) {
					last = end
				}
				c.ObserveLoad("openfaas-fn/f", Load{Requests: uint64(100 * last.Sub(t0).Seconds()), LastRequest: last})
				expired = expired || slices.ContainsFunc(c.Tick(now).Effects, func(e Effect) bool { return e.Kind == Stop && e.Replica.ID == "f-2" })
			}
			if expired != tc.expired {
				t.Errorf("f-2 stopped within 3 min warm: %v, want %v", expired, tc.expired)
			}
		})
	}
}

// Fragmented room: a (55 % SM) on GPU-0-0, b (50) and bs (10) on GPU-0-1,
// c (50) and cs (10) on GPU-0-2 (fillers placed them so, then went). No
// GPU frees as things stand; one pass moves cs beside a, make before
// break, and a later pass frees GPU-0-1 by the usual rule.
func TestConsolidationRepacksThenFrees(t *testing.T) {
	c := New(inventory(1, 3), nil, Options{NoWarm: true})
	for _, f := range []struct {
		name string
		sm   int
	}{{"a", 55}, {"y", 45}, {"b", 50}, {"x", 40}, {"bs", 10}, {"c", 50}, {"cs", 10}} {
		if _, err := c.Deploy(fn(f.name, f.sm, 2, 1, 1), t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"x", "y"} {
		if _, err := c.Delete("openfaas-fn", name, t0); err != nil {
			t.Fatal(err)
		}
	}
	gpuOf := map[string]string{}
	idOf := map[string]string{}
	for _, name := range []string{"a", "b", "bs", "c", "cs"} {
		v, _ := c.Function("openfaas-fn/" + name)
		id := v.Live[0].ID
		c.ReplicaReady(id, t0)
		r, _ := c.Replica(id)
		idOf[name], gpuOf[name] = id, r.Placement.GPUs[0]
	}
	want := map[string]string{"a": "GPU-0-0", "b": "GPU-0-1", "bs": "GPU-0-1", "c": "GPU-0-2", "cs": "GPU-0-2"}
	if !maps.Equal(gpuOf, want) {
		t.Fatalf("placed %v, want %v", gpuOf, want)
	}
	// The repacking pass: cs moves to GPU-0-0; nothing else.
	now := t0.Add(2 * time.Minute)
	got := effectsAbout(c.Tick(now))
	if len(got) != 1 || !strings.HasSuffix(got[0], " on GPU-0-0") || !strings.HasPrefix(got[0], "start cs-") {
		t.Fatalf("repacking pass: %q, want cs started on GPU-0-0", got)
	}
	ncs := strings.Fields(got[0])[1]
	now = now.Add(time.Second)
	if got := effectsAbout(c.ReplicaReady(ncs, now)); !slices.Equal(got, []string{"stop " + idOf["cs"]}) {
		t.Fatalf("cs's new replica ready: %q, want %s stopped", got, idOf["cs"])
	}
	// Within the cool-down of the move: nothing.
	if got := effectsAbout(c.Tick(now.Add(30 * time.Second))); len(got) > 0 {
		t.Fatalf("within the cool-down: %q", got)
	}
	// The next pass frees GPU-0-1: b to GPU-0-2, bs to GPU-0-0.
	now = now.Add(2 * time.Minute)
	got = effectsAbout(c.Tick(now))
	slices.Sort(got)
	if len(got) != 2 || !strings.HasPrefix(got[0], "start b-") || !strings.HasSuffix(got[0], " on GPU-0-2") ||
		!strings.HasPrefix(got[1], "start bs-") || !strings.HasSuffix(got[1], " on GPU-0-0") {
		t.Fatalf("freeing pass: %q, want b on GPU-0-2 and bs on GPU-0-0", got)
	}
	for _, s := range got {
		c.ReplicaReady(strings.Fields(s)[1], now.Add(time.Second))
	}
	c.Tick(now.Add(2 * time.Second))
	for _, u := range c.Usage() {
		if u.Device.UUID == "GPU-0-1" && len(u.Replicas) > 0 {
			t.Errorf("GPU-0-1 still holds %v", u.Replicas)
		}
	}
}

// A function that scaled up by placing a replica holds its replicas
// where they are for the autoscaler's cool-down (30 s), not for
// consolidation's minute: a function flapping by one replica every half
// minute would otherwise pin its GPUs for good. Taking a warm replica
// back holds nothing. A scale-down holds them only where the function
// parks nothing: one that parks gets the capacity back in about a second
// at its next rise, and held, a bursty function's steps down after each
// burst kept its GPUs through every gap.
func TestScalingHoldsReplicasForTheAutoscalersCoolDown(t *testing.T) {
	const pass = 2 * time.Minute
	tests := []struct {
		name     string
		up, down time.Duration // how long before the pass b last scaled; 0: never
		parks    bool          // b asks for a parked process, and the backend can park it
		tookBack bool          // b's last scale-up took a warm replica back, placing none
		moved    bool
	}{
		{"never scaled", 0, 0, false, false, true},
		{"scaled up 20 s before", 20 * time.Second, 0, false, false, false},
		{"scaled up 40 s before", 40 * time.Second, 0, false, false, true},
		{"took a warm replica back 20 s before", 20 * time.Second, 0, false, true, true},
		{"scaled down 20 s before", 0, 20 * time.Second, false, false, false},
		{"scaled down 40 s before", 0, 40 * time.Second, false, false, true},
		{"parks, scaled up 20 s before", 20 * time.Second, 0, true, false, false},
		{"parks, scaled down 5 s before", 0, 5 * time.Second, true, false, true},
		{"parks, scaled down 20 s before", 0, 20 * time.Second, true, false, true},
		{"parks, scaled up 40 s and down 5 s before", 40 * time.Second, 5 * time.Second, true, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var opts Options
			if tc.parks {
				opts.CanPark = func(scheduler.Function) bool { return true }
			}
			c := consolidationCore(t, opts)
			b := c.functions["openfaas-fn/b"]
			if tc.parks {
				b.spec.Scale.Parked = 1
			}
			if tc.up > 0 {
				b.lastUp = t0.Add(pass - tc.up)
				if !tc.tookBack {
					b.lastGrown = b.lastUp
				}
			}
			if tc.down > 0 {
				b.lastDown = t0.Add(pass - tc.down)
			}
			got := effectsAbout(c.Tick(t0.Add(pass)))
			if moved := slices.Equal(got, []string{"start b-4 on GPU-0-0"}); moved != tc.moved {
				t.Errorf("pass: %q, want b moved: %v", got, tc.moved)
			}
		})
	}
}

// Only a scale-up that places a replica holds its function's replicas
// from consolidation (lastGrown); taking a warm one back places nothing.
// Both are scale-ups to the autoscaler's cool-down (lastUp).
func TestOnlyAPlacingScaleUpHoldsFromConsolidation(t *testing.T) {
	c, f := oneWarm(t)
	warm, cfg := f.warm[0].id, f.warm[0].config
	var res Result
	took := t0.Add(time.Minute)
	c.applyScale(f, scheduler.Decision{Promote: []string{warm}, Reason: "test"}, 1, took, &res)
	if len(f.warm) != 0 || !f.lastUp.Equal(took) || !f.lastGrown.IsZero() {
		t.Fatalf("warm replica taken back: %d warm, lastUp %v, lastGrown %v; want 0, %v, zero", len(f.warm), f.lastUp, f.lastGrown, took)
	}
	placed := took.Add(time.Minute)
	c.applyScale(f, scheduler.Decision{Add: []scheduler.SliceConfig{cfg}, Reason: "test"}, 1, placed, &res)
	if got := c.serving(f); got != 3 || !f.lastUp.Equal(placed) || !f.lastGrown.Equal(placed) {
		t.Fatalf("replica placed: %d serving, lastUp %v, lastGrown %v; want 3, both %v", got, f.lastUp, f.lastGrown, placed)
	}
}

// A warm replica can outlive its function's record: on Kubernetes, the
// pods of a function just deleted are seen out of routing, and so warm,
// until they are gone (the resize test's last tick once yielded one).
// It is still stopped to free its GPU, with no function to record the
// yield on.
func TestYieldOfAWarmReplicaWithNoFunction(t *testing.T) {
	c, f := oneWarm(t)
	id := f.warm[0].id
	c.unlink(f)
	var res Result
	c.yield(id, t0.Add(time.Second), "consolidation: its GPU is freed", &res)
	if got := kinds(res); len(got) != 1 || !strings.HasPrefix(got[0], string(Stop)) {
		t.Errorf("effects %q, want the warm replica stopped", got)
	}
}

// oneWarm is twoReady with f scaled down to one replica at t0: the other
// is warm.
func oneWarm(t *testing.T) (*Core, *function) {
	t.Helper()
	c := twoReady(t)
	if _, _, err := c.Scale("openfaas-fn", "f", 1, t0); err != nil {
		t.Fatal(err)
	}
	f := c.functions["openfaas-fn/f"]
	if len(f.warm) != 1 {
		t.Fatalf("%d warm replicas, want 1", len(f.warm))
	}
	return c, f
}

// twoReady is a core on two GPUs with function f (60 % SM, scale to
// zero) deployed at t0 and scaled to two replicas, f-1 and f-2, both
// ready.
func twoReady(t *testing.T) *Core {
	t.Helper()
	c := New(inventory(1, 2), nil, Options{})
	spec := fn("f", 60, 2, 0, 2)
	spec.Scale.Zero = true
	if _, err := c.Deploy(spec, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Scale("openfaas-fn", "f", 2, t0); err != nil {
		t.Fatal(err)
	}
	c.ReplicaReady("f-1", t0)
	c.ReplicaReady("f-2", t0)
	return c
}

// A multi-model function's warm replicas, held for its next burst while
// its period is not known, are held only as far as that burst's planned
// peak needs them (warmForPeak): the replicas added to drain the first
// burst's backlog are more than its rate needs, and held, they kept
// their GPUs to the second burst (zoo11's zk03: 27 GPUs after its first
// burst, for a burst that 12 serve). Some of them yield to consolidation
// after the burst; those its peak needs stay, held; and within the next
// burst, whose peak is still being counted, every hold stands.
func TestWarmHeldForThePlannedPeakOnly(t *testing.T) {
	for _, backlog := range []float64{300, 400, 500} {
		t.Run(fmt.Sprintf("backlog growing %.0f a second", backlog), func(t *testing.T) {
			c := New(inventory(2, 8), nil, Options{Profiles: builtinStore(t)})
			key := deployZoo(t, c, "resnet50", 200*time.Millisecond, 8<<30, 40, time.Hour)
			shares := map[string]float64{"resnet50": 0.5, "densenet121": 0.3, "alexnet": 0.2}
			l := Load{Models: map[string]uint64{}}
			var now time.Time
			yielded := 0
			for s := 1; s <= 160; s++ {
				now = t0.Add(time.Duration(s) * time.Second)
				rate := uint64(100)
				l.Backlog = 0
				if s > 90 && s <= 105 { // a first burst, its backlog growing while it is served
					rate = 200
					l.Backlog = backlog * float64(s-90)
				}
				l.Requests += rate
				for m, sh := range shares {
					l.Models[m] += uint64(float64(rate) * sh)
				}
				l.Loads = l.Requests / 100
				l.LastRequest = now
				c.ObserveLoad(key, l)
				for _, e := range c.Tick(now).Effects {
					if e.Kind == Stop && strings.HasPrefix(e.Why, "consolidation") {
						yielded++
					}
				}
				readyAll(c, now)
			}
			fn := c.functions[key]
			if !fn.burst.Learning() {
				t.Fatal("the burst's period should not be known after one burst")
			}
			if yielded == 0 {
				t.Errorf("no warm replica yielded after a first burst drained by more replicas than its rate needs")
			}
			// Those the peak needs are left, and held; a surplus one may be
			// left too, where its GPU serves others.
			held := c.warmForPeak(fn, now)
			if len(held) == 0 {
				t.Errorf("no warm replica left for the next burst's peak (%d yielded)", yielded)
			}
			warmSince := map[string]time.Time{}
			for _, ir := range c.cache.Idle("") {
				warmSince[ir.ID] = ir.Since
			}
			for id := range held {
				if !c.fixed(id, warmSince, map[string]map[string]bool{key: held}, now) {
					t.Errorf("warm %s, held for the peak, not fixed", id)
				}
			}
			// Once the next burst is under way, its planned peak is still
			// being counted from its first seconds: every hold stands.
			// (The rate history alone sees the burst come: ticked, the
			// core would take the warm replicas back first.)
			for s := 1; s <= 20 && !fn.burst.InBurst(); s++ {
				now = now.Add(time.Second)
				fn.burst.Observe(now, 300)
			}
			if !fn.burst.InBurst() {
				t.Fatal("no second burst seen")
			}
			if held := c.warmForPeak(fn, now); held != nil {
				t.Errorf("within the second burst, held for the peak %v, want every hold standing (nil)", held)
			}
		})
	}
}
