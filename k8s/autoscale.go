package k8s

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
)

// autoscale applies scheduler.Autoscale to every function with an SLO and
// a profile, or with scale to zero: replicas to add become pending (placed
// by the next placePending), replicas to remove drain. counts gives a
// function's invocations so far, its last one and its backlog. It returns
// the functions it changed.
func (s *state) autoscale(now time.Time, counts func(k string) (requests uint64, last time.Time, backlog float64), opts scheduler.AutoscaleOptions) []string {
	var changed []string
	for _, fn := range s.sortedFunctions() {
		requests, last, backlog := counts(fn.key())
		if fn.busySince.After(last) {
			last = fn.busySince
		}
		rate := fn.rate.Observe(requests, now)
		if !fn.plan.Autoscaled && !fn.spec.Scale.Zero {
			continue
		}
		in := scheduler.AutoscaleInput{
			Now: now, Rate: rate, LastRequest: last, Policy: fn.spec.Scale,
			LastScaleUp: fn.lastUp, LastScaleDown: fn.lastDown, Backlog: backlog,
		}
		if fn.plan.Autoscaled {
			in.Configs = fn.plan.Configs
		}
		for _, g := range fn.sortedGroups() {
			for _, id := range g.ids {
				in.Replicas = append(in.Replicas, scheduler.ReplicaCapacity{ID: id, Config: g.config})
			}
		}
		for _, p := range fn.pending {
			in.Replicas = append(in.Replicas, scheduler.ReplicaCapacity{ID: p.id, Config: p.config})
		}
		d := scheduler.Autoscale(in, opts)
		if d.Empty() {
			continue
		}
		for _, id := range d.Remove {
			s.retireID(fn, id)
			fn.lastDown = now
		}
		for _, c := range d.Add {
			fn.pending = append(fn.pending, &pendingReplica{id: newReplicaID(fn.spec.Name()), config: c, since: now.UTC()})
			fn.lastUp = now
		}
		if len(d.Add) > 0 {
			fn.scaledUp++
		}
		if len(d.Remove) > 0 {
			fn.scaledDown++
		}
		fn.desired = fn.placed() + len(fn.pending)
		fn.lastScale = d.Reason
		s.log.Info("autoscaled", zap.String("function", fn.spec.Name()), zap.String("namespace", fn.spec.Namespace()),
			zap.Int("added", len(d.Add)), zap.Int("removed", len(d.Remove)), zap.Int("replicas", fn.desired), zap.Float64("rate", rate), zap.String("reason", d.Reason))
		changed = append(changed, fn.key())
	}
	return changed
}
