package k8s

import (
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"go.uber.org/zap"
)

// A change of a function (deploy, update, scale, delete) is a transaction:
// when its record cannot be written, the core undoes it
// (lifecycle.Core.Abort) and the writer writes the function as it was. The
// operation Abort undoes is the last one on the core because every
// operation on it holds Backend.txMu until its record is written or
// refused; functions the operation also changed (placed on room it freed)
// are not written before then (Backend.held), so nothing of an undone
// change is carried out but what the function's own write did first.

// abort undoes res, the core's last operation. A replica it started in a
// group whose Deployment was written since (mayRun) may have a pod running
// by now: it is booked again as draining, released once the group's pods
// are down to its size like any drain, so the GPU is never given twice.
func (s *state) abort(res lifecycle.Result, mayRun func(ns, group string) bool) {
	type started struct {
		e     lifecycle.Effect
		group string
	}
	var running []started
	for _, e := range res.Effects {
		if e.Kind != lifecycle.Start || e.Replica.Placement == nil {
			continue
		}
		ns, _ := splitKey(e.Function)
		if g := s.groupOf[e.Replica.ID]; g != "" && mayRun(ns, g) {
			running = append(running, started{e, g})
		}
	}
	s.core.Abort()
	s.forgetGone()
	for _, r := range running {
		id := r.e.Replica.ID
		if err := s.core.RestoreDraining(id, r.e.Function, *r.e.Replica.Placement, r.e.Replica.Config); err != nil {
			// Cannot happen: Abort has just freed this very share.
			s.log.Error("a replica an undone change may run is not booked", zap.String("replica", id), zap.Error(err))
			continue
		}
		s.groupOf[id] = r.group
		s.addDrain(r.e.Function, r.group, id)
	}
	for _, e := range res.Effects {
		s.refreshRequest(e.Function)
	}
}
