package lifecycle

import "slices"

// Every operation (Deploy, Update, Scale, Delete) is a transaction: its
// Write or Remove effect comes first, and a backend that cannot carry that
// out calls Abort before carrying out anything else. Abort undoes every
// change the operation made, bookings included, so a failed write leaves
// the function exactly as it was and a retry starts from there.

// begin starts an operation: what an earlier one did can no longer be
// undone.
func (c *Core) begin() {
	c.undo = c.undo[:0]
	c.promoted = nil
}

func (c *Core) onUndo(f func()) { c.undo = append(c.undo, f) }

// touch saves fn's fields and its replicas' as they are now.
func (c *Core) touch(fn *function) {
	saved := *fn
	saved.live, saved.warm = slices.Clone(fn.live), slices.Clone(fn.warm)
	reps := make(map[*replica]replica, len(fn.live)+len(fn.warm))
	for _, r := range fn.live {
		reps[r] = *r
	}
	for _, r := range fn.warm {
		reps[r] = *r
	}
	c.onUndo(func() {
		*fn = saved
		for p, v := range reps {
			*p = v
		}
	})
}

func (c *Core) touchReplica(r *replica) {
	saved := *r
	c.onUndo(func() { *r = saved })
}

// Abort undoes the last operation, if its effects were not carried out.
// Its effects must then be dropped.
func (c *Core) Abort() {
	for i := len(c.undo) - 1; i >= 0; i-- {
		c.undo[i]()
	}
	c.undo = c.undo[:0]
	c.promoted = nil
}
