package lifecycle

import (
	"maps"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// consolidate runs one consolidation pass (scheduler.Consolidate) at
// now: the warm replicas left on a GPU whose moves are done yield; then,
// when the cluster is quiet, the replicas in service on the least-loaded
// GPU that others can take are replaced there, make before break
// (replace), and its warm replicas are stopped. placeAll places the
// replacements on their targets afterwards. The GPUs whose moved replicas
// were retired since the last pass (c.settled, completeReplace) keep their
// warm replicas one pass more, so that one just retired drains first.
func (c *Core) consolidate(now time.Time, res *Result) {
	if c.opts.NoConsolidate {
		return
	}
	busy := false
	from := c.settled // GPUs with a move in flight from them, or just done
	c.settled = map[string]bool{}
	for _, fn := range c.order {
		for _, r := range fn.live {
			if r.placement == nil {
				busy = true
			}
			if r.replacing() {
				busy = true
				if old := c.replicas[r.replaces]; old != nil && old.placement != nil {
					from[old.placement.GPUs[0]] = true
				}
			}
		}
	}
	o := c.opts.Consolidate
	due := o.Due(now, c.lastMove, busy)
	if len(c.freeing) == 0 && !due {
		return // nothing to yield, no pass: no snapshot to take
	}
	usage := c.alloc.Usage()
	c.yieldFreed(usage, from, now, res)
	if !due {
		return
	}
	in := scheduler.ConsolidateInput{Now: now, LastChange: c.lastMove, Busy: busy}
	warmSince := map[string]time.Time{}
	for _, ir := range c.cache.Idle("") {
		warmSince[ir.ID] = ir.Since
	}
	forPeak := map[string]map[string]bool{}
	for _, fn := range c.order {
		if held := c.warmForPeak(fn, now); held != nil {
			forPeak[fn.key] = held
		}
	}
	for _, u := range usage {
		g := scheduler.ConsolidateGPU{UUID: u.Device.UUID, Product: u.Device.Product, MemoryBytes: u.Device.MemoryBytes}
		for _, id := range slices.Sorted(maps.Keys(u.Replicas)) {
			b := u.Replicas[id]
			g.Replicas = append(g.Replicas, scheduler.ConsolidateReplica{ID: id, SMPercent: b.Slice.SMPercent,
				MemoryBytes: b.Slice.MemoryBytes, Warm: b.Idle, Fixed: c.fixed(id, warmSince, forPeak, now)})
		}
		in.GPUs = append(in.GPUs, g)
	}
	plan := scheduler.Consolidate(in, o)
	if plan.Empty() {
		return
	}
	for _, id := range plan.Yield {
		c.yield(id, now, "consolidation: its GPU is freed", res)
	}
	why := "consolidation: moved to free GPU "
	if plan.Room != "" {
		// Moves among the other GPUs that make room for a later pass to
		// free plan.Room; no GPU is being freed yet.
		why = "consolidation: moved to make room to free GPU " + plan.Room + ", from "
	}
	for _, m := range plan.Moves {
		old := c.replicas[m.Replica]
		fn := c.functions[old.fn]
		nr := c.replace(fn, old, old.config, now, why+m.From, res)
		nr.target = m.To
	}
	for _, u := range plan.Free {
		c.freeing[u] = true
	}
	c.lastMove = now
}

// fixed reports whether replica id keeps its GPU in use this pass: it is
// not a plain replica in service or warm (starting, draining, unknown),
// spans GPUs, or its function is new, scaling up (or, for one in service
// of a function that parks nothing, down), waiting for room or in a move;
// a warm one also while just made, while its function has none in
// service, or while it is a bursty function's model cache (keepsCache)
// whose bursts' period is not known or whose next burst is due; for a
// multi-model function, only those of its warm replicas that its last
// burst's planned peak needs (warmForPeak).
func (c *Core) fixed(id string, warmSince map[string]time.Time, forPeak map[string]map[string]bool, now time.Time) bool {
	r := c.replicas[id]
	if r != nil && r.standby {
		return false // spare capacity in spare memory: it never holds a GPU in use
	}
	if r == nil || r.placement == nil || len(r.placement.GPUs) != 1 || (r.phase != Ready && r.phase != Warm) {
		return true
	}
	fn := c.functions[r.fn]
	if fn == nil || fn.plan.Request.WholeGPUs > 0 {
		return true
	}
	// A new function's replicas in service stay where they are until its
	// load has shown itself. Not its warm ones if it serves one model
	// steadily: out of service, they are a scale-down's flap, and held,
	// a warm replica alone on a GPU kept that GPU to the end of the
	// function's first minute (the consolidation run).
	if now.Sub(fn.createdAt) < c.opts.Consolidate.CoolDown && (r.phase != Warm || fn.burst.Bursty() || fn.mix != nil) {
		return true
	}
	// A scale-up that placed a replica holds its function's replicas for
	// the autoscaler's own cool-down, the time within which it does not
	// scale down again, not for consolidation's: a function flapping by
	// one warm replica every half minute would otherwise pin every GPU it
	// has a replica on for good. A scale-up that took a warm replica back
	// holds nothing: it placed nothing, and the function's pool is one it
	// had before. Held, a multi-model function's flaps kept its GPUs
	// between its bursts (the zoo draws: 2.1 % of their GPU-seconds at
	// the same misses).
	//
	// A scale-down holds its function's replicas in service only where
	// the function parks no process. Held, a bursty function's steps down
	// after each burst, one every few seconds for most of a minute,
	// renewed the hold until its next burst's capacity started ahead of
	// it, so its GPUs were never free between bursts (family23's j18:
	// four GPUs through every gap for a base load that needs one and a
	// fraction). Where a function parks, the capacity a freed GPU takes
	// away comes back in about a second at its next rise; where it does
	// not, it comes back a container start later, and its next burst
	// waits for it (without parking, lifting the hold took 4 more of the
	// seen runs above 1 %: g18, y18, c03, d03).
	scaled := c.opts.Autoscale.CoolDown
	if now.Sub(fn.lastGrown) < scaled {
		return true
	}
	if r.phase == Ready && now.Sub(fn.lastDown) < scaled && c.parkAsked(fn) == 0 {
		return true
	}
	if r.phase == Warm {
		// A scale-down is what makes a warm replica; it does not make one
		// likelier to be needed. A warm replica yields unless its
		// function has none in service (a request would then wait out a
		// cold start, and the warm lifetime alone decides), it is a
		// bursty function's model cache, or it is just made (it lives at
		// least the autoscaler's cool-down) for a function that serves
		// many models or is bursty with no known period: there it is a
		// cache of models or the next burst's capacity. A steady
		// one-model function's just-made warm replica is a flap of its
		// rate's noise; its function serves on without it, and held, it
		// kept a light load's second GPU for another half minute each
		// time (the consolidation run).
		//
		// While a bursty function's period is not known, its warm
		// replicas are all its next burst can count on: after its first
		// bursts (Learning) and, just made, after irregular ones. Once
		// known, the burst's capacity starts ahead of it (expectBurst);
		// held all the same, the last burst's warm replicas kept its GPU
		// half a minute into each gap (h10).
		//
		// A bursty function's model cache, too, is held only until its
		// period is known, and after that only while its next burst is
		// due. Between bursts, what starts ahead of the next one loads the
		// mix into its room while it waits (placeModels), and the lead
		// counts those loads (burstLead); held through the gaps, the
		// caches kept GPUs that nothing served on (zd08: 6 GPUs between
		// bursts that 1 serves). Once the burst is due, a cache yielded
		// leaves it what starts in its place, a start-up and the mix's
		// loads late.
		_, periodic := fn.burst.Period()
		young := false
		if idle, ok := warmSince[id]; ok && now.Sub(idle) < scheduler.MinWarmLifetime {
			young = fn.burst.Bursty() && !periodic || fn.mix != nil
		}
		cache := false
		if c.keepsCache(r) {
			_, due := fn.burst.ExpectedBurst(now, fn.burstLead())
			cache = !periodic || due
		}
		// Held for a burst, a multi-model function's warm replica that
		// the burst's planned peak does not need is not held: a first
		// burst's backlog, drained by replicas added for it, leaves more
		// than its rate needs (zoo11's zk03: 27 GPUs held to its second
		// burst, which 12 served).
		learning := fn.burst.Learning()
		if held, ok := forPeak[fn.key]; ok && !held[id] {
			young, cache, learning = false, false, false
		}
		if young || cache || c.serving(fn) == 0 || learning {
			return true
		}
	}
	for _, x := range fn.live {
		if x.placement == nil || x.replacing() {
			return true
		}
	}
	return false
}

// warmForPeak is which of a multi-model function's warm replicas a
// scale-up to its last burst's planned peak would take back
// (scheduler.Autoscale at that rise, with no backlog), the most
// efficient first; nil where fn serves one model, has no warm replica,
// no burst is known or one is under way. For single-model functions it
// was a wash (family to family8: -0.28 % GPU-seconds, mean violations
// 0.165 -> 0.167 %), and their holds are left as they were.
func (c *Core) warmForPeak(fn *function, now time.Time) map[string]bool {
	peak, _, ok := fn.burst.PlannedPeak()
	// Within a burst its planned peak is still being counted, from the
	// burst's first seconds (zoo5's ze10: at an on period's onset the
	// peak read 52 req/s of the last burst's 202, a warm replica yielded
	// as the burst began, and without parking 7.9 % of its requests
	// missed); the holds stand until it is over.
	if !ok || !fn.plan.Autoscaled || fn.mix == nil || len(fn.warm) == 0 || fn.burst.InBurst() {
		return nil
	}
	in := c.autoscaleInput(fn, now, fn.rate.Rate(), max(peak, fn.rate.Rate()))
	in.Backlog, in.RiseConfirmed = 0, true
	held := map[string]bool{}
	for _, id := range scheduler.Autoscale(in, c.opts.Autoscale).Promote {
		held[id] = true
	}
	return held
}

// yieldFreed stops the warm replicas on each GPU consolidation freed once
// no move from it is in flight. A GPU that took a replica in service
// meanwhile (the autoscaler placed one there) is no longer being freed.
func (c *Core) yieldFreed(usage []scheduler.GPUUsage, from map[string]bool, now time.Time, res *Result) {
	if len(c.freeing) == 0 {
		return
	}
	for _, u := range usage {
		if !c.freeing[u.Device.UUID] || from[u.Device.UUID] {
			continue
		}
		delete(c.freeing, u.Device.UUID)
		inService := false
		for _, b := range u.Replicas {
			if !b.Idle {
				inService = true
			}
		}
		if inService {
			continue
		}
		for _, id := range slices.Sorted(maps.Keys(u.Replicas)) {
			c.yield(id, now, "consolidation: its GPU is freed", res)
		}
	}
	for u := range c.freeing {
		if !slices.ContainsFunc(usage, func(x scheduler.GPUUsage) bool { return x.Device.UUID == u }) {
			delete(c.freeing, u) // the GPU is gone
		}
	}
}

// yield stops warm replica id to free its GPU.
func (c *Core) yield(id string, now time.Time, why string, res *Result) {
	r := c.replicas[id]
	if r == nil || r.phase != Warm && !r.standby {
		return
	}
	c.cache.CountEviction(false)
	fn := c.functions[r.fn] // nil where the replica outlived its function's record
	if fn != nil {
		yielded := fn.yieldedSinceBurst()
		if slo := fn.plan.Request.SLO; slo > 0 {
			yielded += scheduler.QueueCapacity(fn.mixValue(r.config), slo, c.opts.Autoscale.SLOQuantile)
		}
		fn.yieldedAt, fn.yieldedRate = now, yielded
	}
	c.stopWarm(fn, r, now, why, res)
}
