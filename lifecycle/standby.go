package lifecycle

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// standbyWhy is a standby's Start, for logs.
const standbyWhy = "standby: started out of service in free GPU memory, for the next rise"

// keepStandbys gives each function scheduler.Standby asks for a standby: a
// replica started out of service (a Start with Warm) that loads its
// model, becomes a warm replica once ready, and is the first a rise
// promotes. It books its memory and no SM, on a GPU that serves already
// and keeps half its memory free after it (Hints.Spare); where none
// does, the function has none until one does. Run after the tick's
// placements, so it takes only what they left. A function with a replica
// leaving (stopped in this pass, or draining where stops are confirmed)
// waits: its standby belongs where that replica's memory frees, which a
// backend that confirms stops still holds booked, so placing it now would
// put it elsewhere there and not on a backend that frees it at once.
func (c *Core) keepStandbys(now time.Time, res *Result) {
	if c.opts.NoStandby || c.opts.NoWarm {
		return
	}
	room := c.alloc.SpareRoom()
	if room <= 0 {
		return
	}
	leaving := map[string]bool{}
	for _, e := range res.Effects {
		if e.Kind == Stop {
			leaving[e.Function] = true
		}
	}
	if c.opts.ConfirmStops {
		for _, r := range c.replicas {
			if r.phase == Draining {
				leaving[r.fn] = true
			}
		}
	}
	added := false
	for _, fn := range c.order {
		if !fn.plan.Autoscaled || room <= 0 || leaving[fn.key] {
			continue
		}
		in := scheduler.StandbyInput{AutoscaleInput: c.autoscaleInput(fn, now, fn.rate.Rate(), 0), Settled: settled(fn), Spare: len(fn.warm)}
		cfg, ok := scheduler.Standby(in, c.opts.Autoscale)
		if !ok || fn.plan.RequestFor(cfg).MemoryBytes > room {
			continue // no GPU has its memory to spare: no scan of them all
		}
		if c.startStandby(fn, cfg, now, res) {
			added = true
			room = c.alloc.SpareRoom()
		}
	}
	if added {
		res.Effects = dedupeWrites(res.Effects)
	}
}

// settled reports whether every replica of fn in service is ready and
// none is being replaced.
func settled(fn *function) bool {
	for _, r := range fn.live {
		if r.phase != Ready || r.replacing() {
			return false
		}
	}
	return true
}

// startStandby places and starts a standby of fn with slice cfg; false
// when no GPU has room for it (Hints.Spare).
func (c *Core) startStandby(fn *function, cfg scheduler.SliceConfig, now time.Time, res *Result) bool {
	r := &replica{id: c.newID(fn.spec.Name()), fn: fn.key, config: cfg, phase: Pending, pendingSince: now.UTC(), standby: true}
	model := fn.plan.Request.Model
	p, _, err := c.alloc.Place(r.id, fn.plan.RequestFor(cfg), scheduler.Hints{Model: model, Now: now, Speed: c.speedFor(fn, cfg), Spare: true, Avoid: c.freeing})
	if err != nil {
		// Not a placement left waiting (it is never added): the next tick
		// asks again.
		return false
	}
	res.Decisions = append(res.Decisions, Placed{Replica: r.id})
	r.placement, r.phase = &p, Starting
	c.replicas[r.id] = r
	fn.warm = append(fn.warm, r)
	res.add(Effect{Kind: Start, Function: fn.key, Replica: r.view(), Warm: true, Why: standbyWhy, Parked: c.handOver(fn, p, now, res)})
	res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
	return true
}

// standbyReady records that standby r answers: a warm replica from now,
// out of service as it started.
func (c *Core) standbyReady(r *replica, res *Result) {
	r.phase = Warm
	if fn := c.functions[r.fn]; fn != nil {
		res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
	}
}

// standbyAlone reports whether r is a standby on a GPU that serves no
// replica any more: it would keep the GPU in use for nobody.
func (c *Core) standbyAlone(r *replica) bool {
	return r.standby && r.placement != nil && len(r.placement.GPUs) > 0 && !c.alloc.Serving(r.placement.GPUs[0])
}
