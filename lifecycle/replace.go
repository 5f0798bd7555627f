package lifecycle

import (
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Make-before-break: a replica is replaced (resized, merged, moved) by
// adding a new pending one that names it (replica.replaces) and retiring
// the old one only once the new one is Ready. Until then the old one
// serves, so no request waits for a start-up and none is lost: the old
// one leaves through the normal path (retire: warm or drained). If the
// new one never becomes Ready (it does not fit, it is lost, it is scaled
// away) the old one simply stays.

// replace adds a pending replica of slice cfg for fn that takes old's
// place once Ready, and returns it. The autoscaler counts the pair once,
// as the new replica (replacedIDs). The caller may constrain where it goes
// (target, for a consolidation move) before placeAll places it.
func (c *Core) replace(fn *function, old *replica, cfg scheduler.SliceConfig, now time.Time, why string, res *Result) *replica {
	r := c.addPending(fn, cfg, now)
	r.replaces, r.replaceWhy = old.id, why
	return r
}

// replacing reports whether r is a replacement that has not taken over
// yet.
func (r *replica) replacing() bool { return r.replaces != "" }

// waitsForRoom reports whether r is a first scale-up's replacement of
// unsized replicas still waiting for room on a GPU in use (growUnsized).
func (r *replica) waitsForRoom() bool {
	return r.grows && r.replacing() && r.placement == nil && !r.roomBy.IsZero()
}

// serving is how many replicas fn has in service or on their way, a
// replacement and the replicas it replaces counting once, as the
// replacement.
func (c *Core) serving(fn *function) int {
	return len(fn.live) - len(replacedIDs(fn))
}

// replacementOf is the live replacement of old in fn, nil if none.
func replacementOf(fn *function, old *replica) *replica {
	for _, r := range fn.live {
		if r.replaces == old.id || slices.Contains(r.replacesMore, old.id) {
			return r
		}
	}
	return nil
}

// cancelReplacements gives up fn's replacements not yet ready (a scale by
// hand decides the count afresh): a pending one is forgotten, a starting
// one stopped; the replicas they were to replace stay.
func (c *Core) cancelReplacements(fn *function, now time.Time, why string, res *Result) {
	for _, r := range slices.Clone(fn.live) {
		if r.replacing() {
			c.dropReplacement(fn, r, now, why, res)
		}
	}
}

// dropReplacement takes replacement r out of fn and ends it.
func (c *Core) dropReplacement(fn *function, r *replica, now time.Time, why string, res *Result) {
	fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
	c.stop(r, now, why, res)
	res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
}

// merge is replace for several replicas at once: one new replica of cfg
// takes the place of every replica of olds when Ready.
func (c *Core) merge(fn *function, olds []*replica, cfg scheduler.SliceConfig, now time.Time, why string, res *Result) *replica {
	r := c.replace(fn, olds[0], cfg, now, why, res)
	for _, o := range olds[1:] {
		r.replacesMore = append(r.replacesMore, o.id)
	}
	return r
}

// replacedIDs are the IDs of fn's live replicas that a live replica of fn
// is on its way to replace.
func replacedIDs(fn *function) map[string]bool {
	out := map[string]bool{}
	for _, r := range fn.live {
		if r.replaces != "" {
			out[r.replaces] = true
			for _, id := range r.replacesMore {
				out[id] = true
			}
		}
	}
	return out
}

// anyReplacing reports whether some replica of fn is still on its way to
// replace another.
func anyReplacing(fn *function) bool {
	for _, r := range fn.live {
		if r.replaces != "" {
			return true
		}
	}
	return false
}

// completeReplace retires the replicas that r, now Ready, replaces: they
// leave as any scaled-down replica does (retire), out of routing with
// what they were sent finishing.
func (c *Core) completeReplace(fn *function, r *replica, now time.Time, res *Result) {
	if r.replaces == "" {
		return
	}
	ids := append([]string{r.replaces}, r.replacesMore...)
	why, moved := r.replaceWhy, r.target != ""
	c.touchReplica(r)
	r.replaces, r.replacesMore, r.replaceWhy, r.target = "", nil, "", ""
	if moved {
		c.lastMove = now // consolidation's cool-down starts again
	}
	for _, id := range ids {
		old := c.replicas[id]
		if old == nil || old.fn != fn.key || !slices.Contains(fn.live, old) {
			continue // gone meanwhile: nothing left to retire
		}
		if moved && old.placement != nil {
			// Its GPU's warm replicas yield at the next pass, once this
			// one has drained (consolidate).
			c.settled[old.placement.GPUs[0]] = true
		}
		c.retire(fn, old, now, "replaced by "+r.id+": "+why, res)
		if old.phase == Warm {
			// Not kept for a scale-up: the resize was made to free what
			// it holds. Out of routing now, it finishes what it was sent
			// and is stopped at the next tick (stopReplaced).
			old.replacedAt = now
		}
	}
	// A merge leaves fewer replicas than it found: the count reported
	// and kept (a restart, Scale's starting point) follows.
	fn.desired = c.serving(fn)
	res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
}

// forgetReplaced drops the claim of any replica of fn on id (id gone, or
// retired another way): the replacement stays as an ordinary replica.
func forgetReplaced(fn *function, id string) {
	for _, r := range fn.live {
		if r.replaces == id {
			if len(r.replacesMore) > 0 {
				r.replaces, r.replacesMore = r.replacesMore[0], r.replacesMore[1:]
			} else {
				r.replaces, r.replaceWhy, r.target = "", "", ""
			}
			continue
		}
		r.replacesMore = slices.DeleteFunc(r.replacesMore, func(x string) bool { return x == id })
	}
}

// cancelStuckReplacements forgets replacements still unplaced a tick after
// they were asked for (no GPU has room for them now), or after the wait
// for room on a GPU in use of one that may then open a GPU (roomBy): the
// replicas they were to replace stay, and the next decision starts
// afresh.
func (c *Core) cancelStuckReplacements(fn *function, now time.Time) {
	for _, r := range slices.Clone(fn.live) {
		if r.replaces != "" && r.placement == nil && now.After(r.pendingSince) && (r.roomBy.IsZero() || now.After(r.roomBy)) {
			fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
			delete(c.replicas, r.id)
		}
	}
}

// stopReplaced stops the warm replicas that a replacement retired before
// now: they left routing at least a tick ago, with no backlog (Resize
// makes none while one waits), so what they were sent is done.
func (c *Core) stopReplaced(now time.Time, res *Result) {
	for _, fn := range c.order {
		for _, r := range slices.Clone(fn.warm) {
			if r.replacedAt.IsZero() || !now.After(r.replacedAt) {
				continue
			}
			c.stopWarm(fn, r, now, "replaced: stopped after leaving routing", res)
		}
	}
}

// needsSuccessor reports whether live replica r of fn, lost, needs a
// pending one in its place: not while a replacement for it is on the way
// (that one takes over), nor when it is itself a replacement and some of
// the replicas it was to replace still serve (they stay).
func needsSuccessor(fn *function, r *replica) bool {
	if replacedIDs(fn)[r.id] {
		return false
	}
	if r.replaces == "" {
		return true
	}
	for _, x := range fn.live {
		if x != r && (x.id == r.replaces || slices.Contains(r.replacesMore, x.id)) {
			return false
		}
	}
	return true
}

// memoryShort reports whether a GPU holding one of fn's replicas has less
// memory free than one more replica of fn takes (warm replicas' memory
// counted as used), so a resize or a scale-up of fn cannot be placed
// there (scheduler.ResizeInput.MemoryShort).
func (c *Core) memoryShort(fn *function) bool {
	for _, r := range fn.live {
		if r.placement == nil || len(r.placement.GPUs) != 1 {
			continue
		}
		used, capacity, ok := c.alloc.Memory(r.placement.GPUs[0])
		if ok && capacity-used < r.placement.Slice.MemoryBytes {
			return true
		}
	}
	return false
}
