package k8s

import (
	"context"
	"sort"
	"strconv"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
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
		id         string
		fn, ns     string
		ready      bool
		readyAfter *float64
	}
	owners := map[string]owner{}
	// describe names the bookings of one group after its pods: the
	// allocator's IDs are this instance's memory, made afresh at every
	// rebuild, while pods are what the cluster holds. A Deployment's pods
	// are not tied to bookings, so bookings and pods are paired in order
	// (live bookings first, ready pods first); a booking without a pod is
	// <group>#<position>, which a rebuild from the same cluster gives
	// again.
	describe := func(ns, fnName, group string, live, draining []string) {
		pods := b.groupPods(ns, group)
		i := 0
		name := func(ids []string) {
			sorted := append([]string(nil), ids...)
			sort.Strings(sorted)
			for _, id := range sorted {
				o := owner{id: group + "#" + strconv.Itoa(i), fn: fnName, ns: ns}
				if i < len(pods) {
					p := pods[i]
					o.id = p.Name
					if podReady(p) {
						d, _ := podStartup(p)
						secs := d.Seconds()
						o.ready, o.readyAfter = true, &secs
					}
				}
				owners[id] = o
				i++
			}
		}
		name(live)
		name(draining)
	}
	drained := map[string]bool{}
	for _, fn := range st.sortedFunctions() {
		ns := fn.spec.Namespace()
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
			var draining []string
			if d, ok := st.drains[fnKey(ns, g.name)]; ok {
				draining, drained[fnKey(ns, g.name)] = d.ids, true
			}
			describe(ns, fn.spec.Name(), g.name, g.ids, draining)
			for _, id := range g.ids {
				if owners[id].ready {
					fr.Ready++
				}
			}
		}
		for i, p := range fn.pending {
			// Pending replicas have no pod: numbered in order, as a rebuild
			// numbers them.
			rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: fn.spec.Name() + "#pending-" + strconv.Itoa(i), Function: fn.spec.Name(), Namespace: ns,
				Reason: p.reason, ReasonCode: p.reasonCode, Since: p.since})
		}
		rep.Functions = append(rep.Functions, fr)
		if fn.plan.Autoscaled || fn.spec.Scale.Zero || fn.scaledUp+fn.scaledDown > 0 {
			rep.Stats.Autoscaler = append(rep.Stats.Autoscaler, scheduler.ScaleActions{Function: fn.spec.Name(), Namespace: ns, Up: fn.scaledUp, Down: fn.scaledDown})
		}
	}
	for _, k := range sortedKeys(st.drains) {
		if d := st.drains[k]; !drained[k] {
			_, name := splitKey(d.fn)
			describe(d.ns, name, d.group, nil, d.ids)
		}
	}
	rep.Nodes = scheduler.NodeReports(st.alloc.Usage(), st.cache, func(id string, rr *scheduler.ReplicaReport) {
		if o, ok := owners[id]; ok {
			rr.ID, rr.Function, rr.Namespace, rr.Ready, rr.ReadyAfterSeconds = o.id, o.fn, o.ns, o.ready, o.readyAfter
		}
	})
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			sort.Slice(g.Replicas, func(i, j int) bool { return g.Replicas[i].ID < g.Replicas[j].ID })
		}
	}
	// The state's cache counts the loads of its own bookings, which every
	// rebuild makes again; the counters this instance keeps do not.
	rep.Cache.Hits, rep.Cache.NodeHits, rep.Cache.Misses = b.cacheHits.Load(), 0, b.cacheMisses.Load()
	return rep
}

// groupPods are the pods of one group that may still use its GPU, in the
// order bookings are paired with them: ready ones, then starting ones, then
// terminating ones, each by name.
func (b *Backend) groupPods(ns, group string) []*corev1.Pod {
	all, _ := b.pods.in(ns).Pods(ns).List(labels.SelectorFromSet(labels.Set{LabelGroup: group}))
	pods := make([]*corev1.Pod, 0, len(all))
	for _, p := range all {
		if !podFinished(p) {
			pods = append(pods, p)
		}
	}
	rank := func(p *corev1.Pod) int {
		switch {
		case p.DeletionTimestamp != nil:
			return 2
		case podReady(p):
			return 0
		default:
			return 1
		}
	}
	sort.Slice(pods, func(i, j int) bool {
		if ri, rj := rank(pods[i]), rank(pods[j]); ri != rj {
			return ri < rj
		}
		return pods[i].Name < pods[j].Name
	})
	return pods
}
