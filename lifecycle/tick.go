package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Load is what the proxy counted of one function.
type Load struct {
	// Requests is every request so far (a running count).
	Requests uint64
	// LastRequest is when the last one arrived (zero: none yet).
	LastRequest time.Time
	// Backlog is how many wait beyond what the replicas serve at once:
	// queued for a replica, or in flight at one above its batch size.
	Backlog float64
	// Models counts the requests so far by the model they name (X-Model;
	// running counts), for a function serving many models: its capacity
	// is planned from this mix (scheduler.MixConfigs). nil: one model.
	Models map[string]uint64
	// Loads counts the model loads its replicas made so far (cache
	// misses and node hits; a running count): their time is counted in
	// the mix's capacity.
	Loads uint64
	// SLOServed counts its requests with an SLO that completed so far,
	// SLOMissed those of them over the SLO or failed (running counts):
	// the autoscaler's correction of the queueing model
	// (scheduler.SLOFeedback).
	SLOServed, SLOMissed uint64
}

// ObserveLoad records what the proxy counted of function key; Tick reads
// it.
func (c *Core) ObserveLoad(key string, l Load) {
	fn, ok := c.functions[key]
	if !ok {
		return
	}
	if l.LastRequest.After(fn.lastRequest) {
		fn.lastRequest = l.LastRequest
	}
	fn.load = l
}

// Tick runs one pass at now: replacements that are ready take over from
// the replicas they replace; warm replicas past their lifetime
// (scheduler.WarmExpired) are stopped; each function's request rate is
// smoothed and, for a function with an SLO and a profile (or with scale
// to zero), the autoscaler's decision is applied, planned for the next
// burst where one is due (expectBurst); a consolidation pass
// may move replicas to free a GPU; pending replicas are placed.
func (c *Core) Tick(now time.Time) Result {
	c.begin()
	defer c.begin() // nothing of a tick is undone
	var res Result
	for _, fn := range c.order {
		fn.observeQuiet()
	}
	c.expireWarm(now, &res)
	c.stopReplaced(now, &res)
	over := map[string]bool{} // functions whose backlog alone outruns their replicas
	for _, fn := range c.order {
		rate := fn.rate.Observe(fn.load.Requests, now)
		fn.burst.Window = c.opts.WarmTTL
		// The rate less its error: a new function's first estimates
		// (the average of a second or two) are no peak to come off.
		fn.burst.Observe(now, max(rate-fn.rate.Error(), 0))
		c.cancelStuckReplacements(fn, now)
		if !fn.plan.Autoscaled && !fn.spec.Scale.Zero {
			continue
		}
		fn.rise.Observe(fn.load.Requests, now)
		if fn.plan.Autoscaled {
			c.observeMix(fn, now)
			c.observeFeedback(fn, now)
		}
		in := c.autoscaleInput(fn, now, rate, fn.rate.Rising())
		// Confirmed on two ticks, or on the last two of the short
		// intervals the Rise pass reads (fn.rise sees this tick's too).
		in.RiseConfirmed = fn.rate.RiseConfirmed() || fn.rise.RiseConfirmed()
		fn.burst.ObservePlanned(max(rate, fn.rate.Rising()))
		expected := c.expectBurst(fn, &in, now)
		if in.SLO > 0 && scheduler.Overloaded(in, c.opts.Autoscale) {
			over[fn.key] = true
		}
		d := scheduler.Autoscale(in, c.opts.Autoscale)
		if d.Empty() {
			if !expected {
				c.resize(fn, in, now, &res)
			}
			continue
		}
		if expected && len(d.Promote)+len(d.Add) > 0 {
			d.Reason += ": a burst is due (scheduler.RateHistory.ExpectedBurst)"
		}
		c.applyScale(fn, d, rate, now, &res)
	}
	c.yieldToEfficient(over, now, &res)
	c.consolidate(now, &res)
	c.placeAll(now, &res)
	c.keepStandbys(now, &res)
	for _, fn := range c.order {
		c.forgetStarts(fn, now, &res)
		c.refillParked(fn, "", now, &res)
		c.placeModels(fn, now, &res)
	}
	return res
}

// burstLeadMargin is added to a function's start-up for how early its
// expected burst's capacity starts: the ticks until the autoscaler acts,
// and the smoothed rate's lag behind the burst's true onset, which the
// learnt period is counted from.
const burstLeadMargin = 10 * time.Second

// expectBurst plans fn's scale-up for its next burst when one is due
// (RateHistory.ExpectedBurst): the rate it points at is a confirmed rise,
// so the burst's capacity starts a start-up ahead of it, warm replicas
// first. While it is due nothing is resized.
func (c *Core) expectBurst(fn *function, in *scheduler.AutoscaleInput, now time.Time) bool {
	if in.SLO <= 0 {
		return false
	}
	peak, ok := fn.burst.ExpectedBurst(now, fn.burstLead())
	if !ok {
		return false
	}
	if yielded := fn.yieldedSinceBurst(); yielded > 0 {
		// The smoothed peak is short of a short burst's height, and the
		// warm replicas the last burst left covered the rest until
		// consolidation stopped them: their capacity is started again,
		// up to the rate planned within that burst. Raised to that
		// rate without a yield, or after any yield, it cost more than
		// it saved (docs/evaluation.md, "An expected burst after a
		// yield").
		//
		// Not so where the yielded replicas were a multi-model
		// function's caches: what the burst finds short is made up by
		// replicas that load its mix after their start-up, tens of
		// seconds of misses where a single-model function's wait a
		// start-up, so the burst is planned at its planned peak (zoo5's
		// ze13, expected at 171 req/s for a burst planned at 276: 1.47
		// → 1.11 % of its requests missed).
		planned, _, _ := fn.burst.PlannedPeak()
		if fn.mix != nil {
			peak = max(peak, planned)
		} else {
			peak = max(peak, min(planned, peak+yielded))
		}
	}
	if peak > in.Rising {
		in.Rising, in.RiseConfirmed = peak, true
	}
	return true
}

// burstLead is how long before its expected onset fn's burst capacity
// starts: a replica's start-up and burstLeadMargin, and for a
// multi-model function the loads that fill a new replica's room with its
// mix (scheduler.CacheFillTime). Its warm model caches yield once its
// period is known (consolidate.go's fixed), and what starts in their
// place serves the burst's mix only once it holds the models they held.
func (fn *function) burstLead() time.Duration {
	lead := fn.startup + burstLeadMargin
	if fn.mix != nil {
		if room := fn.modelRoom(); room > 0 {
			lead += scheduler.CacheFillTime(fn.mix.mix.Models, fn.plan.Profile, room)
		}
	}
	return lead
}

// yieldedSinceBurst is what consolidation stopped of fn's warm replicas
// since its last burst's onset (req/s at its SLO): capacity its next
// burst cannot count on.
func (fn *function) yieldedSinceBurst() float64 {
	if _, onset, ok := fn.burst.PlannedPeak(); !ok || !fn.yieldedAt.After(onset) {
		return 0
	}
	return fn.yieldedRate
}

// DefaultRise is how often a backend runs Rise between ticks: a quarter
// of the default 1-s tick, so that a rise is answered about 0.4 s sooner
// on average (half a tick less half this), which is most of a start-up
// where a replica only loads its model (0.5-1.3 s emulated).
const DefaultRise = 250 * time.Millisecond

// Rise is the short pass a backend may run between ticks, so that a
// rising rate is answered sooner than the next Tick: each function's
// request count is observed (its own estimator, whose last interval is
// the time since the last pass), and where that interval's rate is a rise
// (RateEstimator.Rising above the smoothed rate) its replicas do not
// serve, replicas are added as Tick adds them, warm ones promoted first,
// and placed. Nothing else is decided here: scale-downs, resizes,
// consolidation and warm expiry wait for the Tick, so a Rise that finds no
// rise changes nothing.
func (c *Core) Rise(now time.Time) Result {
	c.begin()
	defer c.begin() // nothing of a pass is undone
	var res Result
	for _, fn := range c.order {
		smoothed := fn.rise.Observe(fn.load.Requests, now)
		rising := fn.rise.RisingLow()
		if !fn.plan.Autoscaled || rising <= smoothed {
			continue
		}
		fn.burst.ObservePlanned(rising)
		in := c.autoscaleInput(fn, now, fn.rate.Rate(), rising)
		in.RiseConfirmed = fn.rise.RiseConfirmed()
		d := scheduler.Autoscale(in, c.opts.Autoscale)
		if len(d.Promote)+len(d.Add) == 0 {
			continue
		}
		d.Remove = nil // a rise never removes
		c.applyScale(fn, d, fn.rate.Rate(), now, &res)
	}
	c.placeAll(now, &res)
	return res
}

// feedbackSettle is how long a function's replicas must have been ready,
// with no backlog, before the misses completing count against the model:
// a cold start's or a burst's queue drains within a few SLOs of it.
const feedbackSettle = 5 * time.Second

// observeFeedback feeds the SLO misses the proxy counted of fn into its
// correction of the queueing model (scheduler.SLOFeedback).
func (c *Core) observeFeedback(fn *function, now time.Time) {
	if fn.plan.Request.SLO <= 0 || c.opts.Autoscale.NoQueueing {
		return
	}
	if fn.load.Backlog > fn.settledBacklog() || anyReplacing(fn) || len(fn.live) == 0 {
		fn.unsettledAt = now
	}
	for _, r := range fn.live {
		if r.phase != Ready {
			fn.unsettledAt = now
		}
	}
	settled := now.Sub(fn.unsettledAt) >= feedbackSettle
	fn.feedback = fn.feedback.Observe(now, fn.load.SLOServed, fn.load.SLOMissed, settled, scheduler.MissBudget(c.opts.Autoscale.SLOQuantile))
}

// settledBacklog is the most requests that may wait for fn while its
// replicas serve as the queueing model expects
// (scheduler.SettledBacklog).
func (fn *function) settledBacklog() float64 {
	var throughput float64
	for _, r := range fn.live {
		throughput += fn.mixValue(r.config).Throughput
	}
	return scheduler.SettledBacklog(throughput, fn.plan.Request.SLO)
}

// autoscaleInput is what the autoscaler reads of fn at now, at the
// smoothed rate and the rate a rise points at (rising).
func (c *Core) autoscaleInput(fn *function, now time.Time, rate, rising float64) scheduler.AutoscaleInput {
	in := scheduler.AutoscaleInput{
		Now: now, Rate: rate, Rising: rising, LastRequest: fn.lastRequest, Policy: fn.spec.Scale,
		LastScaleUp: fn.lastUp, LastScaleDown: fn.lastDown, Backlog: fn.load.Backlog,
		RateError: fn.rate.Error(), Bursty: fn.burst.Bursty(), Parked: len(fn.parked.ready),
		FlapFloor: fn.flap.Floor(now),
	}
	if fn.plan.Autoscaled && !c.opts.Autoscale.NoQueueing {
		in.SLO = fn.plan.Request.SLO
		in.MemoryPercent = c.memoryPercent(fn.plan.Request.MemoryBytes)
	}
	if fn.plan.Autoscaled {
		in.Configs = fn.plan.Configs
		if menu, ok := fn.mixMenu(); ok {
			// Its replicas' time spent loading models is demand too.
			in.Configs = menu
			f := scheduler.MixDemand(fn.mix.mix.LoadPerRequest, menu)
			in.Rate, in.Rising, in.RateError = in.Rate*f, in.Rising*f, in.RateError*f
			in.CacheFloor = scheduler.CacheFloor(fn.mix.mix.Models, fn.modelRoom(), c.opts.Autoscale.SLOQuantile)
		}
		if in.SLO > 0 {
			// What the measured misses say the model leaves out.
			f := fn.feedback.Value()
			in.Rate, in.Rising, in.RateError = in.Rate*f, in.Rising*f, in.RateError*f
			// And the service time: misses that do not grow with the
			// rate are the batches' own (scheduler.SLOFeedback.PlanSLO).
			if slo := fn.feedback.PlanSLO(in.SLO); slo != in.SLO {
				if menu, ok := fn.sloMenu.menuAt(in.Configs, slo, c.opts.Autoscale.SLOQuantile); ok {
					in.SLO, in.Configs = slo, menu
				}
			}
		}
	}
	// Each replica valued as the menu is: at the SLO planned.
	value := func(cfg scheduler.SliceConfig) scheduler.SliceConfig {
		cfg = fn.mixValue(cfg)
		if in.SLO > 0 && cfg.Lone.SLO != in.SLO && (in.SLO != fn.plan.Request.SLO || cfg.Lone.SLO != 0) {
			// Planned at another SLO, or made while the feedback planned
			// at another: its lone rate is cached at that one. At the
			// plan's own SLO a slice with none cached (a multi-model
			// one, valued on the mix) is left as it was.
			cfg, _ = fn.sloMenu.at(cfg, in.SLO, c.opts.Autoscale.SLOQuantile)
		}
		return cfg
	}
	// A replica being replaced counts once, as its replacement: the
	// pair's capacity is what serves once the old one goes.
	replaced := replacedIDs(fn)
	for _, r := range fn.live {
		if !replaced[r.id] {
			// A replacement still waiting for room was sized on the rate
			// of its decision, often a first second's: while it waits, the
			// autoscaler may size it afresh instead of adding beside it.
			rc := scheduler.ReplicaCapacity{ID: r.id, Config: value(r.config), Unsized: r.unsized && !r.replacing() || r.waitsForRoom()}
			if r.placement == nil || r.phase == Starting {
				rc.Starting = true
				if r.placement != nil {
					rc.StartedFor = now.Sub(r.placedAt)
				}
			}
			in.Replicas = append(in.Replicas, rc)
		}
	}
	for _, r := range fn.warm {
		// A standby still starting serves no sooner than a new replica.
		// One whose GPU's SMs went to others meanwhile would come back
		// as a new replica of its slice wherever that fits: for a
		// standby, the most efficient slice, often most of a GPU, opened
		// for a rise a small slice on a GPU in use would serve (h05).
		if r.phase == Warm && (r.demoting || c.alloc.Promotable(r.id)) {
			in.Warm = append(in.Warm, scheduler.ReplicaCapacity{ID: r.id, Config: value(r.config)})
		}
	}
	return in
}

// applyScale carries out the autoscaler's decision d for fn: retires what
// it removes, promotes or adds what it adds, and records the scaling.
func (c *Core) applyScale(fn *function, d scheduler.Decision, rate float64, now time.Time, res *Result) {
	restarted, olds, roomBy := c.replaceUnsized(fn, d, now, res)
	if len(d.Remove) > 0 {
		fn.flap = fn.flap.ScaledDown(now, c.serving(fn), fn.load.SLOServed, fn.load.SLOMissed)
	}
	for _, id := range d.Remove {
		if r := c.replicas[id]; r != nil && r.fn == fn.key {
			c.retire(fn, r, now, "autoscaled down", res)
		}
		fn.lastDown = now
	}
	for _, id := range d.Promote {
		if r := c.replicas[id]; r != nil && !c.promoteReplica(fn, r, now) {
			c.addPending(fn, r.config, now) // its SM share went meanwhile: a new one
			fn.lastGrown = now
		}
		fn.lastUp = now
	}
	added := 0
	for i, cfg := range d.Add {
		if i == 0 && len(olds) > 0 {
			c.growUnsized(fn, olds, cfg, d.Reason, roomBy, now, res)
			fn.lastUp, fn.lastGrown = now, now
			added++
			continue
		}
		switch {
		case c.promote(fn, cfg, true, now):
			// A warm replica back: nothing placed, no hold on consolidation.
		case c.addReplica(fn, cfg, d.Tentative, now, res):
			fn.lastGrown = now
		default:
			continue // tentative, and no GPU in use has room
		}
		fn.lastUp = now
		added++
	}
	if len(d.Promote)+added+len(d.Remove)+restarted == 0 {
		return
	}
	if len(d.Promote)+added > 0 {
		fn.scaledUp++
		// A multi-model function's flap costs the loads of the removed
		// replica's models too; a single-model one's warm replica comes
		// back with its model, and holding it paid nothing on family30,
		// the blind draw (docs/scheduling.md §4, "A scale-down undone
		// with misses"). Its harm is told by the SLO.
		if _, multi := fn.mixMenu(); multi && fn.plan.Request.SLO > 0 {
			next := fn.flap.ScaledUp(now, fn.load.SLOServed, fn.load.SLOMissed, fn.load.Backlog, fn.settledBacklog(), scheduler.MissBudget(c.opts.Autoscale.SLOQuantile))
			if next != fn.flap { // a hold starts
				hold, floor := next.Held(now)
				d.Reason += fmt.Sprintf(": undoes a scale-down that cost misses, so no fewer than %d for %s", floor, hold.Round(time.Second))
			}
			fn.flap = next
		}
	}
	if len(d.Remove) > 0 {
		fn.scaledDown++
	}
	fn.desired = c.serving(fn)
	fn.lastScale = d.Reason
	res.Scaled = append(res.Scaled, Scaled{Function: fn.key, Added: len(d.Promote) + added, Removed: len(d.Remove) + restarted, Replicas: fn.desired, Rate: rate, Reason: d.Reason})
	res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
}

// replaceUnsized carries out d.Replace (scheduler.RestartWithin): each
// unsized replica that has not served yet is stopped at once, before the
// adds are placed, so that where its booking is released at once its
// successor may take its room; the ready ones are returned, for the first
// add to replace make-before-break. Each is replaced once at most: what
// replaces it is sized for the load.
func (c *Core) replaceUnsized(fn *function, d scheduler.Decision, now time.Time, res *Result) (stopped int, ready []*replica, roomBy time.Time) {
	for _, id := range d.Replace {
		r := c.replicas[id]
		if r != nil && r.fn == fn.key && r.waitsForRoom() && slices.Contains(fn.live, r) {
			// Sized afresh: what it was to replace goes to the first
			// add, which waits no longer than it had to.
			fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
			c.stop(r, now, "sized afresh while it waited for room: "+d.Reason, res) // never placed: forgotten, undoably
			for _, oid := range append([]string{r.replaces}, r.replacesMore...) {
				if o := c.replicas[oid]; o != nil && slices.Contains(fn.live, o) {
					ready = append(ready, o)
				}
			}
			roomBy = r.roomBy
			continue
		}
		if r == nil || r.fn != fn.key || !r.unsized || r.replacing() || !slices.Contains(fn.live, r) {
			continue
		}
		r.unsized = false
		switch {
		case r.placement == nil || r.phase == Starting:
			fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
			c.stop(r, now, "restarted right-sized before serving: "+d.Reason, res)
			stopped++
		case r.phase == Ready:
			ready = append(ready, r)
		}
	}
	return stopped, ready, roomBy
}

// growUnsized replaces fn's ready unsized replicas olds by one of cfg
// for a scale-up, make-before-break. The new one may open a GPU, as the
// adds it stands for would; but while another replacement is on its way,
// whose retiring replicas will free their room on a GPU in use, it first
// waits up to scheduler.RestartWithin for room there (replica.roomBy),
// olds serving meanwhile. Opened at once, a GPU was held for a minute or
// more until consolidation freed it: in the consolidation run the eight
// first replicas fill one GPU's memory, and two functions' replacements
// do not fit beside them together, one after the other they do.
func (c *Core) growUnsized(fn *function, olds []*replica, cfg scheduler.SliceConfig, why string, roomBy, now time.Time, res *Result) {
	if roomBy.IsZero() && c.replacementOnItsWay() {
		roomBy = now.Add(scheduler.RestartWithin)
	}
	r := c.merge(fn, olds, cfg, now, why, res)
	r.grows, r.roomBy = true, roomBy
	// Placed at once, as a tentative add of a later function this tick
	// would be: the room goes to the older.
	tried := len(res.Decisions)
	if c.placeOne(fn, r, map[string]map[string]bool{}, now, res) == placedOne {
		res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
		return
	}
	res.Decisions = res.Decisions[:tried] // pending: placeAll tries it again
}

// replacementOnItsWay reports whether some replacement is pending or
// starting: once Ready it retires the replicas it replaces, and their
// room is free.
func (c *Core) replacementOnItsWay() bool {
	for _, fn := range c.order {
		for _, r := range fn.live {
			if r.replacing() {
				return true
			}
		}
	}
	return false
}

// resize asks scheduler.Resize whether fn's replicas, all Ready and none
// being replaced, should give way to a cheaper one, and starts that
// replacement (make-before-break: the old ones go when it is Ready).
func (c *Core) resize(fn *function, in scheduler.AutoscaleInput, now time.Time, res *Result) {
	if in.SLO <= 0 || anyReplacing(fn) {
		return
	}
	for _, r := range fn.live {
		if r.phase != Ready {
			return
		}
	}
	rep, ok := scheduler.Resize(scheduler.ResizeInput{
		Now: now, Rate: in.Rate, Rising: in.Rising, Backlog: in.Backlog, Policy: in.Policy, Replicas: in.Replicas,
		Configs: in.Configs, SLO: in.SLO, MemoryPercent: in.MemoryPercent,
		LastScaleUp: fn.lastUp, LastScaleDown: fn.lastDown, LastResize: fn.lastResize,
		// A bursty function's replicas are its next burst's capacity.
		MemoryShort: c.memoryShort(fn) && !in.Bursty, FlapHeld: in.FlapFloor > 0, CacheFloor: in.CacheFloor,
		LastRequest: fn.lastRequest, Gaps: fn.gaps, WarmTTL: c.opts.WarmTTL, Resumed: fn.resumed,
	}, c.opts.Autoscale)
	if !ok {
		return
	}
	var olds []*replica
	for _, id := range rep.Old {
		if r := c.replicas[id]; r != nil && r.fn == fn.key {
			olds = append(olds, r)
		}
	}
	if len(olds) != len(rep.Old) {
		return
	}
	nr := c.merge(fn, olds, rep.New, now, rep.Reason, res)
	nr.opens = rep.OpensGPU
	fn.lastResize = now
	fn.lastScale = rep.Reason
	res.Scaled = append(res.Scaled, Scaled{Function: fn.key, Added: 1, Removed: len(olds), Replicas: c.serving(fn), Rate: in.Rate, Reason: rep.Reason, Resize: true})
}

// memoryPercent is bytes in % of the largest GPU's memory (0 without an
// inventory or a memory request): what a replica's memory costs the
// autoscaler beside its SM %.
func (c *Core) memoryPercent(bytes int64) float64 {
	most := c.largestMemory
	if most <= 0 || bytes <= 0 {
		return 0
	}
	return 100 * float64(bytes) / float64(most)
}

// expireWarm stops warm replicas past their lifetime: scheduler.WarmExpired
// on how long each has been warm, how long its function has been idle and
// its idle gaps, and its GPU's free memory, with the warm TTL the upper
// bound.
func (c *Core) expireWarm(now time.Time, res *Result) {
	idle := c.cache.Idle("")
	if len(idle) == 0 {
		return
	}
	for _, ir := range idle {
		r := c.replicas[ir.ID]
		if r == nil || r.phase != Warm {
			continue
		}
		fn := c.functions[r.fn]
		in := scheduler.WarmInput{WarmFor: now.Sub(ir.Since), IdleFor: now.Sub(ir.Since), FreeMemory: 1, Max: c.opts.WarmTTL}
		// A function in an idle gap comes back at the load before it:
		// its warm replicas are that load's capacity, and memory
		// pressure does not cut them short (a placement that needs the
		// memory still evicts them).
		gap := fn != nil && scheduler.InIdleGap(now, fn.lastRequest, fn.rate.Rate(), fn.gaps, c.opts.WarmTTL)
		if r.placement != nil && len(r.placement.GPUs) > 0 && !c.keepsCache(r) && !gap {
			if used, capacity, ok := c.alloc.Memory(r.placement.GPUs[0]); ok && capacity > 0 {
				in.FreeMemory = 1 - float64(used)/float64(capacity)
			}
		}
		if fn != nil {
			in.IdleFor, in.Gaps = now.Sub(fn.lastRequest), fn.gaps
		}
		if c.standbyAlone(r) {
			c.stopWarm(fn, r, now, "standby stopped: its GPU serves no replica", res)
			continue
		}
		if !scheduler.WarmExpired(in) {
			continue
		}
		c.cache.CountEviction(true)
		c.stopWarm(fn, r, now, "warm replica expired", res)
	}
}

// keepsCache reports whether warm replica r is a bursty function's model
// cache: it holds more than one model (a new replica would rebuild them
// one load at a time as requests name them) and its function's rate is
// well below its recent peak (scheduler.RateHistory.Bursty), so the next
// busy spell is likely to need it. Such a replica's lifetime is not
// shortened by its GPU's memory pressure (a placement that needs the
// memory still evicts it): the warm TTL and its function's idle gaps
// decide. Consolidation does not free its GPU while its function's
// bursts have no known period, or while the next one is due
// (consolidate.go's fixed). A
// steady function's warm replica exists because its capacity was trimmed
// while its load goes on; it yields as a single-model one does.
func (c *Core) keepsCache(r *replica) bool {
	fn := c.functions[r.fn]
	return fn != nil && c.cache.ModelCount(r.id) > 1 && fn.burst.Bursty()
}

// maxGaps is how many idle gaps a function remembers: enough for a
// 90th percentile, few enough to follow a change of pattern.
const maxGaps = 32

// observeQuiet follows fn's idle gaps, once a tick: a tick with no new
// request starts (or continues) a quiet spell from the last request seen;
// the first request after one ends it, and the time from the last request
// before it to the last one now is recorded — the gap itself when one
// request came, an upper bound when several did (the lifetime errs long).
// A function with a request every tick has no idle gaps, however its
// requests are spread: the core cannot see finer than a tick.
func (fn *function) observeQuiet() {
	switch {
	case fn.load.Requests == fn.seen:
		if !fn.quiet {
			fn.quiet, fn.quietFrom = true, fn.lastRequest
		}
	case fn.quiet:
		fn.quiet = false
		if d := fn.lastRequest.Sub(fn.quietFrom); d >= scheduler.MinIdleGap {
			if scheduler.IsIdleGap(d, fn.rate.Rate()) {
				fn.resumed = fn.lastRequest
			}
			if len(fn.gaps) == maxGaps {
				fn.gaps = append(fn.gaps[:0], fn.gaps[1:]...)
			}
			fn.gaps = append(fn.gaps, d)
		}
	}
	fn.seen = fn.load.Requests
}

// Scaled is one autoscaler decision applied, for logs and metrics.
type Scaled struct {
	Function       string
	Added, Removed int
	Replicas       int
	Rate           float64
	Reason         string
	// Resize marks a make-before-break replacement started: Added new
	// replica for Removed old ones, which go when it is Ready.
	Resize bool
}
