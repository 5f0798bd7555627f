package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Deploy adds a function with its initial replicas, placed where they fit.
// The function's Write comes first among the effects: a backend that
// cannot write it calls Abort and carries out nothing.
func (c *Core) Deploy(spec scheduler.Function, now time.Time) (Result, error) {
	c.begin()
	k := Key(spec.Namespace(), spec.Name())
	if _, ok := c.functions[k]; ok {
		return Result{}, fmt.Errorf("function %s.%s: %w", spec.Name(), spec.Namespace(), errExist)
	}
	pl, err := c.Check(spec)
	if err != nil {
		return Result{}, err
	}
	fn := &function{key: k, spec: spec, plan: pl, desired: spec.Scale.InitialReplicas(), createdAt: now.UTC(),
		lastRequest: now} // a new function is not idle yet
	c.insert(fn)
	c.onUndo(func() { c.unlink(fn) })
	var res Result
	c.grow(fn, now)
	c.placeAll(now, &res)
	c.refillParked(fn, "", now, &res)
	return c.finish(res, fn), nil
}

// Update replaces a function's spec. Every replica is stopped (drained)
// and placed afresh on the new plan: old and new never share a GPU beyond
// its capacity, which has no room for a surge.
func (c *Core) Update(spec scheduler.Function, now time.Time) (Result, error) {
	c.begin()
	k := Key(spec.Namespace(), spec.Name())
	fn, ok := c.functions[k]
	if !ok {
		return Result{}, notFound(k)
	}
	pl, err := c.Check(spec)
	if err != nil {
		return Result{}, err
	}
	var res Result
	c.touch(fn)
	c.stopAll(fn, now, "function updated", &res)
	c.unparkAll(fn, "function updated", &res)
	fn.spec, fn.plan, fn.parkRefused = spec, pl, ""
	fn.desired = spec.Scale.Clamp(fn.desired)
	c.grow(fn, now)
	c.placeAll(now, &res)
	c.refillParked(fn, "", now, &res)
	return c.finish(res, fn), nil
}

// Delete removes a function; its booked replicas drain.
func (c *Core) Delete(namespace, name string, now time.Time) (Result, error) {
	c.begin()
	k := Key(namespace, name)
	fn, ok := c.functions[k]
	if !ok {
		return Result{}, notFound(k)
	}
	var res Result
	res.add(Effect{Kind: Remove, Function: k})
	c.touch(fn)
	c.stopAll(fn, now, "function removed", &res)
	c.unparkAll(fn, "function removed", &res)
	c.unlink(fn)
	c.onUndo(func() { c.insert(fn) })
	c.placeAll(now, &res)
	return res, nil
}

// Scale sets the desired replica count, inside the function's bounds, and
// returns the count set. Growth promotes warm replicas first (most
// recently idled first), then adds pending ones of the base slice;
// shrinking drops pending replicas first, then demotes the newest in
// service to warm replicas, so the next scale-up is a cache hit.
func (c *Core) Scale(namespace, name string, n int, now time.Time) (Result, int, error) {
	c.begin()
	k := Key(namespace, name)
	fn, ok := c.functions[k]
	if !ok {
		return Result{}, 0, notFound(k)
	}
	want := fn.spec.Scale.Clamp(n)
	var res Result
	c.touch(fn)
	if want > fn.desired {
		fn.lastRequest = now // a scale-up is demand: not idle
	}
	fn.desired = want
	c.cancelReplacements(fn, now, "scaled by hand: move given up", &res)
	for len(fn.live) > want {
		victim := len(fn.live) - 1
		for i := len(fn.live) - 1; i >= 0; i-- {
			if fn.live[i].placement == nil {
				victim = i
				break
			}
		}
		c.retire(fn, fn.live[victim], now, "scaled down", &res)
	}
	c.grow(fn, now)
	c.placeAll(now, &res)
	return c.finish(res, fn), want, nil
}

// finish puts fn's record first: the operation holds only once it is
// written.
func (c *Core) finish(res Result, fn *function) Result {
	res.Effects = append([]Effect{{Kind: Write, Function: fn.key, Record: fn.record()}}, withoutWrite(res.Effects, fn.key)...)
	return res
}

func withoutWrite(effs []Effect, key string) []Effect {
	return slices.DeleteFunc(effs, func(e Effect) bool { return e.Kind == Write && e.Function == key })
}

// grow brings fn up to its desired count: warm replicas first, most
// recently idled first, then new pending replicas of the base slice.
func (c *Core) grow(fn *function, now time.Time) {
	base := c.baseSlice(fn)
	for len(fn.live) < fn.desired && c.promote(fn, base, false, now) {
	}
	for len(fn.live) < fn.desired {
		c.addPending(fn, base, now).unsized = true
	}
}

// baseSlice is the slice of a replica added before its load is known: for
// a function the autoscaler plans on queueing capacity, the smallest that
// carries load at the SLO (scheduler.SmallestSlice: the autoscaler sizes
// the rest); otherwise the plan's.
func (c *Core) baseSlice(fn *function) scheduler.SliceConfig {
	if !fn.plan.Autoscaled || c.opts.Autoscale.NoQueueing || fn.plan.Request.SLO <= 0 {
		return fn.plan.Base
	}
	configs := fn.plan.Configs
	if menu, ok := fn.mixMenu(); ok {
		configs = menu
	}
	if s, ok := scheduler.SmallestSlice(configs, fn.plan.Request.SLO, c.opts.Autoscale.SLOQuantile, c.memoryPercent(fn.plan.Request.MemoryBytes)); ok {
		return s
	}
	return fn.plan.Base
}

func (c *Core) addPending(fn *function, cfg scheduler.SliceConfig, now time.Time) *replica {
	r := &replica{id: c.newID(fn.spec.Name()), fn: fn.key, config: cfg, phase: Pending, pendingSince: now.UTC()}
	fn.live = append(fn.live, r)
	c.replicas[r.id] = r
	c.onUndo(func() { delete(c.replicas, r.id) })
	return r
}

// promote puts one of fn's warm replicas back in service, preferring one
// of slice cfg when exact. The Promote effect is queued on the pending
// result of the current operation (see pendingPromotes).
func (c *Core) promote(fn *function, cfg scheduler.SliceConfig, exact bool, now time.Time) bool {
	for i := len(fn.warm) - 1; i >= 0; i-- {
		r := fn.warm[i]
		if exact && r.config.SMPercent != cfg.SMPercent {
			continue
		}
		if c.promoteReplica(fn, r, now) {
			return true
		}
	}
	return false
}

// promoteReplica brings warm replica r of fn back into service; false
// when its SM share went to someone else meanwhile.
func (c *Core) promoteReplica(fn *function, r *replica, now time.Time) bool {
	i := slices.Index(fn.warm, r)
	if i < 0 {
		return false
	}
	if r.demoting {
		// Its share was never released: nothing to book again.
		r.demoting = false
		c.onUndo(func() { r.demoting = true })
	} else {
		if err := c.alloc.Promote(r.id); err != nil {
			return false
		}
		c.onUndo(func() { _ = c.alloc.Demote(r.id, now) })
	}
	fn.warm = slices.Delete(fn.warm, i, i+1)
	fn.live = append(fn.live, r)
	r.phase, r.replacedAt, r.standby = Ready, time.Time{}, false
	c.promoted = append(c.promoted, Effect{Kind: Promote, Function: fn.key, Replica: r.view(), Why: "scaled up: warm replica back in service, no model load"})
	return true
}

// retire takes r out of service: a pending one is forgotten, a booked one
// becomes a warm replica.
func (c *Core) retire(fn *function, r *replica, now time.Time, why string, res *Result) {
	fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
	forgetReplaced(fn, r.id)
	r.replaces, r.replacesMore, r.replaceWhy = "", nil, "" // a replacement scaled away: what it was to replace stays
	if r.placement == nil {
		delete(c.replicas, r.id)
		c.onUndo(func() { c.replicas[r.id] = r })
		return
	}
	if c.opts.NoWarm {
		c.stop(r, now, why, res)
		return
	}
	if c.opts.ConfirmDemotes {
		// Out of service for the core, but its share stays booked until
		// ReplicaDemoted: the backend may route to it until then.
		r.demoting = true
		c.onUndo(func() { r.demoting = false })
	} else if err := c.alloc.Demote(r.id, now); err == nil {
		c.onUndo(func() { _ = c.alloc.Promote(r.id) })
	}
	r.phase = Warm
	fn.warm = append(fn.warm, r)
	res.add(Effect{Kind: Demote, Function: fn.key, Replica: r.view(), Why: why + ": kept warm, model in memory, out of service"})
}

// stopAll stops every replica of fn, in service or warm.
func (c *Core) stopAll(fn *function, now time.Time, why string, res *Result) {
	for _, r := range append(slices.Clone(fn.live), fn.warm...) {
		c.stop(r, now, why, res)
	}
	fn.live, fn.warm = nil, nil
}

// stop ends r. A pending one is forgotten. A booked one drains until
// ReplicaGone where the backend confirms stops (Options.ConfirmStops);
// elsewhere its booking is released at once.
func (c *Core) stop(r *replica, now time.Time, why string, res *Result) {
	if r.placement == nil {
		delete(c.replicas, r.id)
		c.onUndo(func() { c.replicas[r.id] = r })
		return
	}
	c.touchReplica(r)
	r.phase, r.demoting = Draining, false
	res.add(Effect{Kind: Stop, Function: r.fn, Replica: r.view(), Why: why})
	if !c.opts.ConfirmStops {
		c.release(r, now)
	}
}

// release frees r's booking and forgets it.
func (c *Core) release(r *replica, now time.Time) {
	if r.placement != nil {
		p, warm := *r.placement, r.phase == Warm && !r.demoting
		if err := c.alloc.Release(r.id, now); err == nil {
			c.onUndo(func() {
				if c.alloc.Restore(r.id, p) == nil && warm {
					_ = c.alloc.Demote(r.id, now)
				}
			})
		}
	}
	delete(c.replicas, r.id)
	c.onUndo(func() { c.replicas[r.id] = r })
}

// placeAll places pending replicas, oldest function first, and queues the
// effects: Start for each placed replica, Stop for each warm replica
// evicted to make room, Write for each function whose bookings changed.
func (c *Core) placeAll(now time.Time, res *Result) {
	if len(c.promoted) > 0 {
		for _, e := range c.promoted {
			res.add(e)
			if f := c.functions[e.Function]; f != nil {
				res.add(Effect{Kind: Write, Function: f.key, Record: f.record()})
			}
		}
		c.promoted = nil
	}
	// GPUs that replicas placed in this pass will load each model on:
	// the next replica of the model sees them as holding it.
	loading := map[string]map[string]bool{}
	if r := c.replicas[c.first]; r != nil && r.placement == nil {
		// A replica another yielded its room to (yieldToEfficient) goes
		// before the oldest functions, which would take that room again.
		if fn := c.functions[r.fn]; fn != nil && c.placeOne(fn, r, loading, now, res) == placedOne {
			res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
		}
	}
	c.first = ""
	for _, fn := range c.order {
		placed := false
		var unmoved []*replica
		for _, r := range fn.live {
			if r.placement != nil {
				continue
			}
			switch c.placeOne(fn, r, loading, now, res) {
			case placedOne:
				placed = true
			case unmovedOne:
				unmoved = append(unmoved, r)
			}
		}
		for _, r := range unmoved {
			c.dropReplacement(fn, r, now, "move given up: its target GPU has no room", res)
		}
		if placed {
			res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
		}
	}
	res.Effects = dedupeWrites(res.Effects)
}

// placeOutcome is what placeOne made of a pending replica.
type placeOutcome uint8

const (
	notPlaced placeOutcome = iota
	placedOne
	unmovedOne // a move whose target has no room: the caller gives it up
)

// placeOne tries to place pending replica r of fn, queueing its effects;
// loading records the GPUs that replicas placed in this pass load each
// model on.
func (c *Core) placeOne(fn *function, r *replica, loading map[string]map[string]bool, now time.Time, res *Result) placeOutcome {
	model := fn.plan.Request.Model
	p, evicted, err := c.alloc.Place(r.id, fn.plan.RequestFor(r.config), scheduler.Hints{Model: model, Now: now, Speed: c.speedFor(fn, r.config), Loading: loading[model], GPU: r.target, Parked: fn.parked.readyGPUs(c.inv),
		Occupied: r.replacing() && r.target == "" && !r.opens && (!r.grows || now.Before(r.roomBy)) || r.tentative})
	res.Decisions = append(res.Decisions, Placed{Replica: r.id, Err: err, Evicted: evicted})
	if err != nil && r.target != "" {
		// A move whose target filled meanwhile: the replica it
		// was to replace stays where it is.
		return unmovedOne
	}
	if err != nil {
		if r.reason != err.Error() {
			c.touchReplica(r)
			r.reason, r.reasonCode = err.Error(), scheduler.NoFitCodeOf(err)
		}
		return notPlaced
	}
	id := r.id
	c.onUndo(func() { _ = c.alloc.Release(id, now) })
	if loading[model] == nil {
		loading[model] = map[string]bool{}
	}
	for _, u := range p.GPUs {
		loading[model][u] = true
	}
	if len(evicted) > 0 && c.opts.ConfirmStops {
		// The evicted warm replicas' pods may run a while yet: they
		// drain, their memory still booked, and r waits for it
		// rather than share a GPU beyond its memory.
		_ = c.alloc.Release(id, now)
		for _, gone := range evicted {
			c.evictDraining(gone, now, res)
		}
		c.touchReplica(r)
		r.reason, r.reasonCode = "waiting for evicted warm replicas to stop: their GPU memory is needed", scheduler.NoFitMemory
		return notPlaced
	}
	for _, gone := range evicted {
		c.evicted(gone, now, res)
	}
	c.touchReplica(r)
	r.placement, r.reason, r.reasonCode, r.phase, r.placedAt = &p, "", "", Starting, now
	res.add(Effect{Kind: Start, Function: fn.key, Replica: r.view(), Why: r.replaceWhy, Parked: c.handOver(fn, p, now, res)})
	return placedOne
}

// dedupeWrites keeps each function's last Write, where its first was, so
// that one operation writes a record once.
func dedupeWrites(effs []Effect) []Effect {
	last := map[string]int{}
	for i, e := range effs {
		if e.Kind == Write {
			last[e.Function] = i
		}
	}
	seen := map[string]bool{}
	out := make([]Effect, 0, len(effs))
	for _, e := range effs {
		if e.Kind == Write {
			if seen[e.Function] {
				continue
			}
			seen[e.Function] = true
			e = effs[last[e.Function]]
		}
		out = append(out, e)
	}
	return out
}

// evicted forgets a warm replica the allocator evicted to free memory (it
// released the booking and told the cache) and stops it.
func (c *Core) evicted(id string, now time.Time, res *Result) {
	r := c.replicas[id]
	if r == nil {
		return
	}
	fn := c.functions[r.fn]
	saved := *r
	c.onUndo(func() {
		*r = saved
		if r.placement != nil {
			_ = c.alloc.Restore(r.id, *r.placement)
			_ = c.alloc.Demote(r.id, now)
		}
		c.replicas[r.id] = r
	})
	delete(c.replicas, id)
	c.stopEvicted(fn, r, res)
	r.placement = nil // already released by the allocator
}

// evictDraining stops a warm replica the allocator evicted, where stops
// are confirmed: its memory is booked again and drains until ReplicaGone,
// so nothing is placed into memory its pod still holds.
func (c *Core) evictDraining(id string, now time.Time, res *Result) {
	r := c.replicas[id]
	if r == nil || r.placement == nil {
		return
	}
	fn := c.functions[r.fn]
	c.touchReplica(r)
	// Memory only, as a warm replica holds, and not idle: the allocator
	// must not evict it again while its pod goes.
	held := *r.placement
	held.Slice.SMPercent = 0
	if c.alloc.Restore(r.id, held) == nil {
		id := r.id
		c.onUndo(func() { _ = c.alloc.Release(id, now) })
	}
	c.stopEvicted(fn, r, res)
}

// stopEvicted takes evicted warm replica r out of fn and stops it.
func (c *Core) stopEvicted(fn *function, r *replica, res *Result) {
	if fn != nil {
		c.touch(fn)
		fn.warm = slices.DeleteFunc(fn.warm, func(x *replica) bool { return x == r })
		res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
	}
	r.phase = Draining
	res.add(Effect{Kind: Stop, Function: r.fn, Replica: r.view(), Why: "warm replica evicted: its GPU memory was needed"})
}

// speedFor is the profiled throughput of fn's model at slice cfg on each
// product, for placement's preference for fast GPUs; only profiles
// measured on that product count.
func (c *Core) speedFor(fn *function, cfg scheduler.SliceConfig) func(string) float64 {
	model := fn.plan.Request.Model
	return func(product string) float64 {
		p, fb, ok := c.opts.Profiles.Lookup(model, product)
		if !ok || fb.Used() {
			return 0
		}
		lat, err := scheduler.LatencyAt(p, max(cfg.Batch, 1), float64(cfg.SMPercent))
		if err != nil || lat <= 0 {
			return 0
		}
		return float64(max(cfg.Batch, 1)) * 1000 / lat
	}
}

// fallbackPlan keeps a restored function running as stored when its
// profile no longer gives a plan.
func fallbackPlan(spec scheduler.Function, err error) scheduler.Plan {
	return scheduler.Plan{Request: spec.GPU, Base: scheduler.SliceConfig{SMPercent: spec.GPU.SliceOn(gpu.Device{}).SMPercent, Batch: 1}, Decision: err.Error()}
}

// stopWarm stops warm replica r (expired, yielding, replaced) and writes
// its function's record without it; fn is nil for a replica whose
// function is gone.
func (c *Core) stopWarm(fn *function, r *replica, now time.Time, why string, res *Result) {
	if fn != nil {
		fn.warm = slices.DeleteFunc(fn.warm, func(x *replica) bool { return x == r })
	}
	c.stop(r, now, why, res)
	if fn != nil {
		res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
	}
}
