package lifecycle

import (
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// addReplica adds a pending replica of slice cfg to fn, placed with the
// others by placeAll, and reports true. A tentative one (a scale-up
// within the noise of its demand, scheduler.Decision.Tentative) is placed
// at once and only on a GPU already in use; where none has room it is
// not added (false): opening a GPU for it would hold that GPU for minutes
// on the strength of a chance count. The next tick decides afresh, firmly
// if the demand has shown itself meanwhile.
func (c *Core) addReplica(fn *function, cfg scheduler.SliceConfig, tentative bool, now time.Time, res *Result) bool {
	r := c.addPending(fn, cfg, now)
	if !tentative {
		return true
	}
	r.tentative = true
	tried := len(res.Decisions)
	placed := c.placeOne(fn, r, map[string]map[string]bool{}, now, res) == placedOne
	r.tentative = false
	if !placed {
		// Never pending: not counted as a placement left waiting.
		res.Decisions = res.Decisions[:tried]
		fn.live = slices.DeleteFunc(fn.live, func(x *replica) bool { return x == r })
		delete(c.replicas, r.id)
		return false
	}
	res.add(Effect{Kind: Write, Function: fn.key, Record: fn.record()})
	return true
}
