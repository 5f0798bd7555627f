package lifecycle

import (
	"fmt"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Restored is one function of Restore that could not come back as
// recorded, for the backend's logs.
type Restored struct {
	Function string
	// PlanErr is why the function's profile no longer gives a plan: it
	// keeps its stored request.
	PlanErr error
	// Lost are the replicas whose booking could not be restored, with
	// why: they are pending again.
	Lost map[string]error
}

// Restore brings back functions from their records, as after a restart:
// each booked replica on the GPU it had (warm ones warm), oldest function
// first; a booking that no longer fits leaves its replica pending. Every
// restored replica gets a Start; a function is written again only when
// what is booked differs from its record.
func (c *Core) Restore(recs []Record, now time.Time) (Result, []Restored) {
	c.begin()
	defer c.begin()
	var res Result
	var report []Restored
	changed := map[string]bool{}
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b Record) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for _, rec := range recs {
		k := Key(rec.Function.Namespace(), rec.Function.Name())
		if _, dup := c.functions[k]; dup {
			continue
		}
		var note Restored
		pl, err := c.PlanFor(rec.Function)
		if err != nil {
			note.PlanErr = err
			pl = fallbackPlan(rec.Function, err)
		}
		// A restored function is not idle yet: its idle time starts now.
		fn := &function{key: k, spec: rec.Function, plan: pl, desired: rec.Replicas, createdAt: rec.CreatedAt, lastRequest: now}
		for _, pr := range rec.Placed {
			r := &replica{id: pr.ID, fn: k, config: pr.Config, phase: Starting, pendingSince: now.UTC()}
			if r.config.SMPercent == 0 {
				r.config = pl.Base
			}
			c.replicas[r.id] = r
			// A warm replica holds its memory, not its SM share.
			restore := c.alloc.Restore
			if pr.Idle {
				restore = func(id string, p scheduler.Placement) error { return c.alloc.RestoreIdle(id, p, now) }
			}
			if err := restore(pr.ID, pr.Placement); err != nil {
				if note.Lost == nil {
					note.Lost = map[string]error{}
				}
				note.Lost[pr.ID] = err
				changed[k] = true
				if pr.Idle {
					delete(c.replicas, r.id)
				} else {
					r.phase = Pending
					fn.live = append(fn.live, r)
				}
				continue
			}
			p := pr.Placement
			r.placement = &p
			if pr.Idle {
				if pr.Standby {
					_ = c.alloc.MarkSpare(pr.ID)
					r.standby = true
				}
				r.phase = Warm
				fn.warm = append(fn.warm, r)
			} else {
				fn.live = append(fn.live, r)
			}
		}
		c.insert(fn)
		before := len(fn.live)
		c.grow(fn, now)
		if len(fn.live) != before {
			changed[k] = true
		}
		if note.PlanErr != nil || note.Lost != nil {
			note.Function = k
			report = append(report, note)
		}
	}
	c.promoted = nil // warm replicas grow promoted are started in service below
	for _, fn := range c.order {
		for _, r := range fn.live {
			if r.placement != nil {
				r.phase = Starting
				res.add(Effect{Kind: Start, Function: fn.key, Replica: r.view()})
			}
		}
		for _, r := range fn.warm {
			res.add(Effect{Kind: Start, Function: fn.key, Replica: r.view(), Warm: true})
		}
	}
	c.placeAll(now, &res)
	for k := range changed {
		if fn := c.functions[k]; fn != nil {
			res.add(Effect{Kind: Write, Function: k, Record: fn.record()})
		}
	}
	res.Effects = dedupeWrites(res.Effects)
	return res, report
}

// RestoreDraining books id on p as a replica already stopped whose
// process may still use the GPU (on Kubernetes: pods of a Deployment
// scaled down or deleted, seen at a restart, or pods a write that was
// undone may have started). function may be one the core does not know.
// The booking is released by ReplicaGone, like any drained replica's.
func (c *Core) RestoreDraining(id, function string, p scheduler.Placement, cfg scheduler.SliceConfig) error {
	c.begin()
	defer c.begin()
	return c.restoreDraining(Held{ID: id, Function: function, Placement: p, Config: cfg})
}

func (c *Core) restoreDraining(d Held) error {
	if _, taken := c.replicas[d.ID]; taken {
		return fmt.Errorf("replica %s: %w", d.ID, errExist)
	}
	if err := c.alloc.Restore(d.ID, d.Placement); err != nil {
		return fmt.Errorf("draining replica %s: %w", d.ID, err)
	}
	p := d.Placement
	c.replicas[d.ID] = &replica{id: d.ID, fn: d.Function, config: d.Config, phase: Draining, placement: &p}
	return nil
}
