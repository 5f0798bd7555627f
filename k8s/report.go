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
		Functions: []scheduler.FunctionReport{}, Cache: st.cache.Stats(), Stats: st.stats.Stats()}
	type owner struct {
		fn         *function
		ready      bool
		readyAfter *float64
	}
	owners := map[string]owner{}
	for _, fn := range st.sortedFunctions() {
		ns := fn.spec.Namespace()
		// The start-up of each ready pod, by group.
		readyIn := map[string][]float64{}
		for _, p := range b.functionPods(ns, fn.spec.Name()) {
			if podReady(p) {
				d, _ := podStartup(p)
				readyIn[p.Labels[LabelGroup]] = append(readyIn[p.Labels[LabelGroup]], d.Seconds())
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
			startups := readyIn[g.name]
			sort.Float64s(startups)
			for i, id := range ids {
				// Pods are not tied to bookings: the first k of a group with
				// k ready pods count as ready, with those pods' start-ups.
				o := owner{fn: fn}
				if i < len(startups) {
					o.ready, o.readyAfter = true, &startups[i]
					fr.Ready++
				}
				owners[id] = o
			}
		}
		for _, p := range fn.pending {
			rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: p.id, Function: fn.spec.Name(), Namespace: ns, Reason: p.reason, ReasonCode: p.reasonCode, Since: p.since})
		}
		rep.Functions = append(rep.Functions, fr)
		if fn.plan.Autoscaled || fn.spec.Scale.Zero || fn.scaledUp+fn.scaledDown > 0 {
			rep.Stats.Autoscaler = append(rep.Stats.Autoscaler, scheduler.ScaleActions{Function: fn.spec.Name(), Namespace: ns, Up: fn.scaledUp, Down: fn.scaledDown})
		}
	}
	drainOf := map[string]*drain{}
	for _, d := range st.drains {
		for _, id := range d.ids {
			drainOf[id] = d
		}
	}
	rep.Nodes = scheduler.NodeReports(st.alloc.Usage(), st.cache, func(id string, rr *scheduler.ReplicaReport) {
		if o, ok := owners[id]; ok {
			rr.Function, rr.Namespace, rr.Ready, rr.ReadyAfterSeconds = o.fn.spec.Name(), o.fn.spec.Namespace(), o.ready, o.readyAfter
		} else if dr, ok := drainOf[id]; ok {
			_, name := splitKey(dr.fn)
			rr.Function, rr.Namespace = name, dr.ns
		}
	})
	return rep
}
