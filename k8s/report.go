package k8s

import (
	"context"
	"sort"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// GPUReport describes every GPU of the cluster, the replicas booked on it
// (draining ones included: their pods still run), the replicas waiting for
// room, and each function's slice decision.
func (b *Backend) GPUReport(ctx context.Context) (scheduler.ClusterReport, error) {
	var rep scheduler.ClusterReport
	b.read(func(st *state) { rep = b.report(st) })
	return rep, nil
}

func (b *Backend) report(st *state) scheduler.ClusterReport {
	rep := scheduler.ClusterReport{Source: "kubernetes", Nodes: []scheduler.NodeReport{}, Pending: []scheduler.PendingEntry{},
		Functions: []scheduler.FunctionReport{}, Cache: st.cache.Stats()}
	type owner struct {
		fn    *function
		ready bool
	}
	owners := map[string]owner{}
	for _, fn := range st.sortedFunctions() {
		ns := fn.spec.Namespace()
		readyIn := map[string]int{}
		for _, p := range b.functionPods(ns, fn.spec.Name()) {
			if podReady(p) {
				readyIn[p.Labels[LabelGroup]]++
			}
		}
		fr := scheduler.FunctionReport{
			Name: fn.spec.Name(), Namespace: ns, Model: fn.plan.Request.Model,
			SMPercent: fn.plan.Base.SMPercent, MemoryBytes: fn.plan.Request.MemoryBytes, Batch: max(fn.plan.Base.Batch, 1),
			Autoscaled: fn.plan.Autoscaled, Decision: fn.plan.Decision, Rate: fn.rate.Rate(),
			Replicas: fn.desired, Pending: len(fn.pending), LastScale: fn.lastScale,
		}
		if fn.plan.Request.SLO > 0 {
			fr.SLO = fn.plan.Request.SLO.String()
		}
		for _, g := range fn.sortedGroups() {
			ids := append([]string(nil), g.ids...)
			sort.Strings(ids)
			for i, id := range ids {
				// Pods are not tied to bookings: the first k of a group with
				// k ready pods count as ready.
				r := i < readyIn[g.name]
				owners[id] = owner{fn: fn, ready: r}
				if r {
					fr.Ready++
				}
			}
		}
		for _, p := range fn.pending {
			rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: p.id, Function: fn.spec.Name(), Namespace: ns, Reason: p.reason, Since: p.since})
		}
		rep.Functions = append(rep.Functions, fr)
	}
	drainOf := map[string]*drain{}
	for _, d := range st.drains {
		for _, id := range d.ids {
			drainOf[id] = d
		}
	}
	rep.Nodes = scheduler.NodeReports(st.alloc.Usage(), st.cache, func(id string, rr *scheduler.ReplicaReport) {
		if o, ok := owners[id]; ok {
			rr.Function, rr.Namespace, rr.Ready = o.fn.spec.Name(), o.fn.spec.Namespace(), o.ready
		} else if dr, ok := drainOf[id]; ok {
			_, name := splitKey(dr.fn)
			rr.Function, rr.Namespace = name, dr.ns
		}
	})
	return rep
}
