package lifecycle

import (
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// ReplicaReady records that a starting replica answers requests. A
// replica that replaces others (replace.go) retires them now: the result
// holds their Demote or Stop, and any placement the SM they free allows.
func (c *Core) ReplicaReady(id string, now time.Time) Result {
	c.begin()
	defer c.begin()
	var res Result
	r := c.replicas[id]
	if r == nil || r.phase != Starting {
		return res
	}
	if r.standby {
		c.standbyReady(r, &res)
		return res
	}
	r.phase = Ready
	if fn := c.functions[r.fn]; fn != nil {
		if !r.placedAt.IsZero() {
			fn.startup = now.Sub(r.placedAt)
		}
		if r.replaces != "" {
			c.completeReplace(fn, r, now, &res)
			c.placeAll(now, &res)
		}
	}
	return res
}

// ReplicaDemoted records that a demoted replica is out of routing (see
// Options.ConfirmDemotes): its SM share is released, and what waited for
// it is placed. A replica promoted, stopped or gone since, or confirmed
// already, is left as it is.
func (c *Core) ReplicaDemoted(id string, now time.Time) Result {
	c.begin()
	defer c.begin()
	var res Result
	r := c.replicas[id]
	if r == nil || r.phase != Warm || !r.demoting {
		return res
	}
	r.demoting = false
	_ = c.alloc.Demote(r.id, now)
	c.placeAll(now, &res)
	return res
}

// ReplicaGone records that a replica can no longer use its GPU: a drained
// one's booking is released; one in service or warm that was lost (its
// pod deleted, its process given up on) is released too, and a replica in
// service is replaced by a pending one of the same slice.
func (c *Core) ReplicaGone(id string, now time.Time) Result {
	c.begin()
	defer c.begin()
	var res Result
	r := c.replicas[id]
	if r == nil {
		return res
	}
	fn := c.functions[r.fn]
	switch r.phase {
	case Draining:
		c.release(r, now)
	default:
		if fn == nil {
			c.release(r, now)
			break
		}
		inService := slices.Contains(fn.live, r)
		needed := inService && needsSuccessor(fn, r)
		forgetReplaced(fn, r.id)
		fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
		fn.warm = slices.DeleteFunc(fn.warm, func(x *replica) bool { return x == r })
		c.release(r, now)
		if needed {
			c.addPending(fn, r.config, now)
		}
		res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
	}
	c.placeAll(now, &res)
	return res
}

// SetInventory follows the cluster's GPUs. A node gone loses its replicas;
// any other change (a node added, a GPU gone or changed) books every
// replica again on a fresh allocator, oldest function first, and those
// that no longer fit are lost. A lost replica in service is replaced by a
// pending one, placed elsewhere at once or when room appears.
func (c *Core) SetInventory(inv gpu.Inventory, now time.Time) Result {
	res, _ := c.SetInventoryHolding(inv, nil, now)
	return res
}

// Held is a replica stopped whose process may still use its GPU (see
// RestoreDraining).
type Held struct {
	ID, Function string
	Placement    scheduler.Placement
	Config       scheduler.SliceConfig
}

// SetInventoryHolding is SetInventory that books held as draining
// replicas once the new GPUs are known and before anything is placed on
// them: on Kubernetes, pods left on a node that was lost still run there
// when it comes back. It returns the IDs of held that were booked; one
// that does not fit is left out.
func (c *Core) SetInventoryHolding(inv gpu.Inventory, held []Held, now time.Time) (Result, []string) {
	c.begin()
	defer c.begin()
	var res Result
	if c.inv.SameGPUs(inv) {
		return res, nil
	}
	var lost []string
	keep := nodesOf(inv)
	for n := range nodesOf(c.inv) {
		if !keep[n] {
			lost = append(lost, c.alloc.RemoveNode(n, now)...)
		}
	}
	rest := gpu.Inventory{Source: inv.Source}
	for _, n := range c.inv.Nodes {
		if keep[n.Name] {
			rest.Nodes = append(rest.Nodes, n)
		}
	}
	if !rest.SameGPUs(inv) {
		lost = append(lost, c.rebook(inv, now)...)
	}
	c.inv, c.product, c.largestMemory = inv, inv.MainProduct(), inv.LargestMemory()
	slices.Sort(lost)
	for _, id := range lost {
		r := c.replicas[id]
		if r == nil {
			continue
		}
		// The Stop names where it ran: where its GPU is still there (a
		// rebook it no longer fits) its process may still run on it, and
		// the backend drains it there. The replica itself holds nothing.
		v := r.view()
		r.placement = nil // its booking is gone with the node or GPU
		fn := c.functions[r.fn]
		wasLive := fn != nil && slices.Contains(fn.live, r)
		if wasLive {
			wasLive = needsSuccessor(fn, r)
			forgetReplaced(fn, r.id)
		}
		if fn != nil {
			fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
			fn.warm = slices.DeleteFunc(fn.warm, func(x *replica) bool { return x == r })
		}
		delete(c.replicas, id)
		res.add(Effect{Kind: Stop, Function: r.fn, Replica: v, Why: "its node or GPU is gone"})
		if wasLive {
			c.addPending(fn, r.config, now)
		}
		if fn != nil {
			res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
		}
	}
	var booked []string
	for _, h := range held {
		if c.restoreDraining(h) == nil {
			booked = append(booked, h.ID)
		}
	}
	c.placeAll(now, &res)
	return res, booked
}

// rebook moves every booking onto a fresh allocator for inv and returns
// those that do not fit any more: draining ones first (their pods run
// now), then by function age. The model cache stays the same object (the
// proxy reads it): each replica is taken out of it and put back with the
// models it held.
func (c *Core) rebook(inv gpu.Inventory, now time.Time) []string {
	held := c.alloc.Placements()
	a := scheduler.NewAllocator(inv, c.cache)
	var order []*replica
	for _, r := range c.replicas {
		if r.phase == Draining {
			order = append(order, r)
		}
	}
	slices.SortFunc(order, func(a, b *replica) int { return compareStrings(a.id, b.id) })
	for _, fn := range c.order {
		order = append(order, fn.live...)
		order = append(order, fn.warm...)
	}
	// A warm replica rebooked is as long idle as before: its lifetime
	// does not start again.
	since := map[string]time.Time{}
	for _, ir := range c.cache.Idle("") {
		since[ir.ID] = ir.Since
	}
	// Each replica is booked again as the allocator held it, not as its
	// phase suggests: a warm replica stopped (yielded, expired, its
	// function deleted) drains holding its memory only, and booked with
	// its SM share it took the room of the replicas in service beside it.
	was := map[string]scheduler.Booking{}
	for _, u := range c.alloc.Usage() {
		for id, b := range u.Replicas {
			was[id] = b
		}
	}
	var lost []string
	for _, r := range order {
		p, ok := held[r.id]
		if !ok {
			continue
		}
		models := c.cache.Models(r.id)
		c.cache.RemoveReplica(r.id, now)
		var err error
		if b := was[r.id]; b.Idle {
			idle := now
			if t, ok := since[r.id]; ok {
				idle = t
			}
			err = a.RestoreIdle(r.id, p, idle)
			if err == nil && b.Spare {
				_ = a.MarkSpare(r.id)
			}
		} else {
			err = a.Restore(r.id, p)
		}
		if err != nil {
			lost = append(lost, r.id)
			continue
		}
		var own gpu.Request
		if fn := c.functions[r.fn]; fn != nil {
			own = fn.plan.Request
		}
		for i := len(models) - 1; i >= 0; i-- { // least recently used first, so the order comes back
			size := int64(DefaultModelBytes)
			if models[i] == own.Model {
				size = modelBytes(own)
			}
			c.cache.Preload(r.id, models[i], size, now)
		}
	}
	c.alloc = a
	return lost
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func nodesOf(inv gpu.Inventory) map[string]bool {
	out := map[string]bool{}
	for _, n := range inv.Nodes {
		out[n.Name] = true
	}
	return out
}

// DefaultModelBytes sizes a model no profile describes, for the cache.
const DefaultModelBytes = 256 << 20

func modelBytes(req gpu.Request) int64 {
	if req.ModelSizeBytes > 0 {
		return req.ModelSizeBytes
	}
	return DefaultModelBytes
}
