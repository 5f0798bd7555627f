package lifecycle

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// yieldToEfficient runs once a tick, after the autoscaler: when replicas
// of overloaded functions (over; scheduler.Overloaded) wait for room that
// no GPU has, the least efficient replica in service of another
// overloaded function, or where none alone makes the room the least
// efficient ones on one GPU together, give their room up to the most
// efficient waiting one (scheduler.Yield: full-batch throughput per cost,
// by YieldMargin), so that in an overload the GPUs go to the slices that
// serve most rather than to the functions that asked first. Those that
// yield become warm replicas, as a scale-down makes; each function keeps
// at least one replica in service.
func (c *Core) yieldToEfficient(over map[string]bool, now time.Time, res *Result) {
	if len(over) == 0 {
		return
	}
	var pending, live []scheduler.YieldCandidate
	var smUsed map[string]int // by GPU, made only when something waits
	for _, fn := range c.order {
		if !over[fn.key] {
			continue
		}
		mem := c.memoryPercent(fn.plan.Request.MemoryBytes)
		replaced := replacedIDs(fn)
		var mine, waiting []scheduler.YieldCandidate
		for _, r := range fn.live {
			cand := scheduler.YieldCandidate{ID: r.id, Function: fn.key, Config: r.config, Cost: scheduler.YieldCost(r.config, fn.plan.Request.SLO, mem)}
			switch {
			case r.placement == nil && r.reason != "" && r.target == "" && r.replaces == "":
				waiting = append(waiting, cand) // tried, and fits nowhere
			case r.placement != nil && r.phase == Ready && r.replaces == "" && !replaced[r.id] && len(r.placement.GPUs) == 1:
				if smUsed == nil {
					smUsed = map[string]int{}
					for _, u := range c.alloc.Usage() {
						smUsed[u.Device.UUID] = u.SMAllocated
					}
				}
				cand.GPU, cand.Held = r.placement.GPUs[0], r.placement.Slice.SMPercent
				cand.Room = 100 - smUsed[cand.GPU] + cand.Held
				mine = append(mine, cand)
			}
		}
		for i := range mine {
			mine[i].Spare = len(mine) > 1
		}
		for i := range waiting {
			waiting[i].Serving = len(mine)
		}
		live = append(live, mine...)
		pending = append(pending, waiting...)
	}
	victims, to, ok := scheduler.Yield(pending, live)
	if !ok {
		return
	}
	touched := map[*function]bool{}
	var order []*function
	for _, id := range victims {
		r := c.replicas[id]
		fn := c.functions[r.fn]
		c.retire(fn, r, now, "overload: yields its room to "+to+", which serves more per cost", res)
		if !touched[fn] {
			touched[fn] = true
			order = append(order, fn)
		}
	}
	for _, fn := range order {
		fn.lastDown = now
		fn.desired = c.serving(fn)
		res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
	}
	c.first = to
}
