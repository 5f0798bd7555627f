package lifecycle

import (
	"testing"
	"time"
)

// standbyRun deploys resnet50 at a 100-ms SLO on one 16-GiB GPU, runs it
// at 20 req/s for 20 s (every replica started is made ready at once) and
// returns the core, its key, its load and the time reached; starts counts
// the standbys started out of service (Start with Warm).
func standbyRun(t *testing.T, opts Options, memory int64, zero bool) (c *Core, key string, l Load, now time.Time, starts int) {
	t.Helper()
	store := builtinStore(t)
	opts.Profiles = store
	c = New(inventory(1, 1), nil, opts)
	spec := rnSpec()
	spec.GPU.MemoryBytes = memory
	spec.Scale.Zero, spec.Scale.ZeroDuration = zero, 30*time.Second
	if _, err := c.Deploy(spec, t0); err != nil {
		t.Fatal(err)
	}
	key = Key("openfaas-fn", "rn")
	for s := 1; s <= 20; s++ {
		now = t0.Add(time.Duration(s) * time.Second)
		res := tickWith(c, key, &l, 20, now)
		for _, e := range res.Effects {
			if e.Kind == Start && e.Warm {
				starts++
				if e.Why != standbyWhy {
					t.Errorf("a warm start for %q, want a standby's", e.Why)
				}
			}
		}
		readyAll(c, now)
	}
	return c, key, l, now, starts
}

// A function with an SLO keeps one standby: started out of service, warm
// once ready, never routed to or counted as serving, and the first
// replica a rise brings into service, with no start-up.
func TestStandbyServesTheNextRise(t *testing.T) {
	c, key, l, now, starts := standbyRun(t, Options{}, 0, false)
	if starts != 1 {
		t.Fatalf("%d standbys started in 20 s at a steady rate, want 1", starts)
	}
	v, _ := c.Function(key)
	if len(v.Warm) != 1 || v.Warm[0].Phase != Warm || v.Desired != len(v.Live) {
		t.Fatalf("after 20 s: %d in service, %d desired, warm %+v; want the standby warm, out of the count", len(v.Live), v.Desired, v.Warm)
	}
	standby := v.Warm[0]
	if standby.Placement == nil || standby.Placement.GPUs[0] != v.Live[0].Placement.GPUs[0] {
		t.Fatalf("standby placed at %+v, want the GPU its function serves on", standby.Placement)
	}
	// Its SM is not booked: the GPU's SM holds only the replica in service.
	if u := c.alloc.Usage()[0]; u.SMAllocated != v.Live[0].Config.SMPercent {
		t.Fatalf("GPU SM booked %d%%, want the %d%% in service only", u.SMAllocated, v.Live[0].Config.SMPercent)
	}
	// A 6x step: the Rise pass brings the standby back at once.
	l.Requests += 30 // 120 req/s for 250 ms
	c.ObserveLoad(key, l)
	res := c.Rise(now.Add(250 * time.Millisecond))
	promoted := false
	for _, e := range res.Effects {
		if e.Kind == Promote && e.Replica.ID == standby.ID {
			promoted = true
		}
	}
	if !promoted {
		t.Fatalf("a 6x step promoted no standby: %q", kinds(res))
	}
	after, _ := c.Function(key)
	if len(after.Warm) != 0 || len(after.Live) < 2 {
		t.Fatalf("after the step: %d in service, %d warm; want the standby in service", len(after.Live), len(after.Warm))
	}
}

// Where a standby may not go, none is kept.
func TestStandbyOnlyInSpareMemory(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		memory int64 // each replica's GPU memory
	}{
		{"turned off", Options{NoStandby: true}, 0},
		{"no warm replicas at all", Options{NoWarm: true}, 0},
		// 5 GiB in service and 5 GiB more would leave 6 of 16 GiB, under
		// half: a warm replica's lifetime would shrink at once.
		{"less than half the GPU's memory free after it", Options{}, 5 << 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, key, _, _, starts := standbyRun(t, tt.opts, tt.memory, false)
			if v, _ := c.Function(key); starts != 0 || len(v.Warm) != 0 {
				t.Fatalf("%d standbys started, %d warm; want none", starts, len(v.Warm))
			}
		})
	}
}

// A standby never holds a GPU in use by itself: once its GPU serves no
// replica (here its function scaled to zero), it stops.
func TestStandbyStopsOnAGPUServingNobody(t *testing.T) {
	c, key, l, now, starts := standbyRun(t, Options{}, 0, true)
	if starts != 1 {
		t.Fatalf("%d standbys, want 1", starts)
	}
	stopped := false
	for s := 1; s <= 600 && !stopped; s++ {
		at := now.Add(time.Duration(s) * time.Second)
		c.ObserveLoad(key, l) // no request since
		for _, e := range c.Tick(at).Effects {
			if e.Kind == Stop && e.Why == "standby stopped: its GPU serves no replica" {
				stopped = true
			}
		}
		readyAll(c, at)
	}
	v, _ := c.Function(key)
	if !stopped || len(v.Live) != 0 {
		t.Fatalf("scaled to zero: standby stopped %v, %d in service, %d warm", stopped, len(v.Live), len(v.Warm))
	}
}

// A standby is restored as one after a restart: out of service, its
// memory free to placements, its SM unbooked.
func TestStandbyRestored(t *testing.T) {
	c, key, _, now, _ := standbyRun(t, Options{}, 0, false)
	rec := c.functions[key].record()
	c2 := New(inventory(1, 1), nil, c.opts)
	c2.Restore([]Record{*rec}, now.Add(time.Minute))
	v, _ := c2.Function(key)
	if len(v.Warm) != 1 {
		t.Fatalf("restored %d warm replicas, want the standby", len(v.Warm))
	}
	id := v.Warm[0].ID
	if r := c2.replicas[id]; r == nil || !r.standby {
		t.Fatalf("replica %s restored, not as a standby", id)
	}
	u := c2.alloc.Usage()[0]
	if b := u.Replicas[id]; !b.Idle || !b.Spare || u.SMAllocated != v.Live[0].Config.SMPercent {
		t.Fatalf("restored booking %+v, GPU SM %d%%; want idle and spare, the SM of the replica in service only", b, u.SMAllocated)
	}
}

// A standby that finds no room is not a placement left pending: it is
// never added, and the scheduler-decision metrics do not count it.
func TestStandbyWithoutRoomIsNoPendingPlacement(t *testing.T) {
	store := builtinStore(t)
	c := New(inventory(1, 1), nil, Options{Profiles: store})
	// 80 % of the SM booked by another function: rn's first replica fits,
	// its 25 % standby does not.
	if _, err := c.Deploy(fn("filler", 80, 1, 1, 1), t0); err != nil {
		t.Fatal(err)
	}
	spec := rnSpec()
	if _, err := c.Deploy(spec, t0); err != nil {
		t.Fatal(err)
	}
	key := rnKey
	l := Load{}
	for s := 1; s <= 10; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		res := tickWith(c, key, &l, 10, now)
		for _, d := range res.Decisions {
			if d.Err != nil {
				t.Fatalf("second %d: a placement of %s reported pending: %v", s, d.Replica, d.Err)
			}
		}
		readyAll(c, now)
	}
	if v, _ := c.Function(key); len(v.Warm) != 0 || len(v.Live) != 1 {
		t.Fatalf("%d in service, %d warm; want 1 and no standby", len(v.Live), len(v.Warm))
	}
}

// A standby whose GPU's SMs went to another function meanwhile is not
// offered for a rise: promoted, it would come back as a new replica of its
// slice (the most efficient, often most of a GPU) on a GPU nobody uses,
// for a rise seen once that the GPU in use answers no sooner.
func TestStandbyWithoutItsSMIsNotPromoted(t *testing.T) {
	store := builtinStore(t)
	c, l, now := steadyRN(t, store, 2, 20, 20)
	v, _ := c.Function(rnKey)
	if len(v.Warm) != 1 || len(v.Live) != 1 {
		t.Fatalf("after 20 s: %d in service, %d warm; want one of each (the standby)", len(v.Live), len(v.Warm))
	}
	used := v.Live[0].Placement.GPUs[0]
	if v.Warm[0].Placement.GPUs[0] != used {
		t.Fatalf("standby on %s, want %s", v.Warm[0].Placement.GPUs[0], used)
	}
	// Another function takes the rest of the GPU's SMs.
	filler := fn("filler", 100-v.Live[0].Config.SMPercent, 1, 1, 1)
	if _, err := c.Deploy(filler, now); err != nil {
		t.Fatal(err)
	}
	fv, _ := c.Function(Key("openfaas-fn", "filler"))
	if len(fv.Live) != 1 || fv.Live[0].Placement == nil || fv.Live[0].Placement.GPUs[0] != used {
		t.Fatalf("filler placed at %+v, want on %s", fv.Live, used)
	}
	readyAll(c, now)
	// A 6x step, seen once (the Rise pass).
	l.Requests += 30
	c.ObserveLoad(rnKey, *l)
	res := c.Rise(now.Add(250 * time.Millisecond))
	for _, e := range res.Effects {
		if e.Kind == Start && e.Replica.Placement != nil && e.Replica.Placement.GPUs[0] != used {
			t.Errorf("a rise seen once opened GPU %s: %s %s (%d%% SM)", e.Replica.Placement.GPUs[0], e.Kind, e.Replica.ID, e.Replica.Config.SMPercent)
		}
		if e.Kind == Promote {
			t.Errorf("promoted %s, whose GPU has no SM free", e.Replica.ID)
		}
	}
}
