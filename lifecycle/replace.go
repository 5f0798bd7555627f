package lifecycle

import (
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Replacing a replica is make before break: the new one is added pending
// beside the old, which serves until the new one is ready; only then is
// the old one retired (demoted to a warm replica, or stopped where there
// are none), and it drains what it was sent through the backend's normal
// path, so no request is lost. If the new replica is gone before it is
// ready (it fits nowhere, it is lost, the function is scaled by hand) the
// old one stays as it was. The pair counts once in the autoscaler's
// capacity: the old replica's, until the new one takes over.

// replace adds a pending replica of slice cfg that replaces old once it is
// ready, and returns it. The caller may constrain where it goes (target,
// for a consolidation move) before placeAll places it. res is where a
// caller's effects go; adding a replacement has none of its own until it
// is placed.
func (c *Core) replace(fn *function, old *replica, cfg scheduler.SliceConfig, now time.Time, why string, res *Result) *replica {
	nr := c.addPending(fn, cfg, now)
	nr.replaces, nr.why = old.id, why
	return nr
}

// replacing reports whether r is a replacement not yet in service in its
// own right.
func (r *replica) replacing() bool { return r.replaces != "" }

// serving is how many replicas fn has in service or on their way, a
// replacement and the replica it replaces counting once.
func (c *Core) serving(fn *function) int {
	n := 0
	for _, r := range fn.live {
		if !r.replacing() {
			n++
		}
	}
	return n
}

// settleReplacements retires each replaced replica whose replacement is
// ready, and forgets the pairing where the old replica went first (it was
// scaled down or lost): the new one is then an ordinary replica. It
// returns the GPUs the retired replicas were on.
func (c *Core) settleReplacements(now time.Time, res *Result) map[string]bool {
	from := map[string]bool{}
	for _, fn := range c.order {
		for _, r := range slices.Clone(fn.live) {
			if !r.replacing() {
				continue
			}
			old := c.replicas[r.replaces]
			if old == nil || !slices.Contains(fn.live, old) {
				r.replaces, r.target = "", ""
				continue
			}
			if r.phase != Ready {
				continue
			}
			r.replaces, r.target = "", ""
			c.lastMove = now
			if old.placement != nil {
				from[old.placement.GPUs[0]] = true
			}
			c.retire(fn, old, now, r.why+": replaced by "+r.id, res)
			res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
		}
	}
	return from
}

// cancelReplacements gives up fn's replacements not yet ready: a pending
// one is forgotten, a starting one stopped; the replicas they were to
// replace stay.
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

// replacementOf is the live replacement of old in fn, nil if none.
func replacementOf(fn *function, old *replica) *replica {
	for _, r := range fn.live {
		if r.replaces == old.id {
			return r
		}
	}
	return nil
}
