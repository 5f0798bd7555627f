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
		Functions: []scheduler.FunctionReport{}, Cache: st.core.Cache().Stats(), Stats: st.stats.Stats()}
	type owner struct {
		id         string
		fn, ns     string
		ready      bool
		readyAfter *float64
	}
	owners := map[string]owner{}
	// describe names the bookings of one group after their pods
	// (pairPods); a booking without a pod is <group>#<position>, which a
	// rebuild from the same cluster gives again, whatever the core's IDs.
	describe := func(ns, fnName, group string, live, warm, draining []string) {
		for _, pr := range b.pairPods(st, ns, group, live, warm, draining) {
			o := owner{id: group + "#" + strconv.Itoa(pr.pos), fn: fnName, ns: ns}
			if p := pr.pod; p != nil {
				o.id = p.Name
				if pr.pos >= 0 && podReady(p) {
					d, _ := podStartup(p)
					secs := d.Seconds()
					o.ready, o.readyAfter = true, &secs
				}
			}
			owners[pr.id] = o
		}
	}
	drained := map[string]bool{}
	for _, v := range st.core.Functions() {
		ns, fnName := v.Spec.Namespace(), v.Spec.Name()
		fr := scheduler.FunctionReport{
			Name: fnName, Namespace: ns, Model: v.Plan.Request.Model,
			SMPercent: v.Plan.Base.SMPercent, MemoryBytes: v.Plan.Request.MemoryBytes, Batch: max(v.Plan.Base.Batch, 1),
			Autoscaled: v.Plan.Autoscaled, Decision: v.Plan.Decision, Rate: v.Rate,
			Replicas: v.Desired, LastScale: v.LastScale, Idle: len(v.Warm),
			ParkedTarget: st.core.ParkedTarget(v.Key), ParkedRefused: st.core.ParkedRefusal(v.Key),
		}
		fr.Parked, _ = st.core.Parked(v.Key)
		if v.Plan.Request.SLO > 0 {
			fr.SLO = v.Plan.Request.SLO.String()
		}
		for _, g := range st.groups(v) {
			var draining []string
			if d, ok := st.drains[fnKey(ns, g.name)]; ok {
				draining, drained[fnKey(ns, g.name)] = d.ids, true
			}
			describe(ns, fnName, g.name, g.ids, g.warm, draining)
			for _, id := range g.ids {
				if owners[id].ready {
					fr.Ready++
				}
			}
		}
		i := 0
		for _, r := range v.Live {
			if r.Placement != nil {
				continue
			}
			// Pending replicas have no pod: numbered in order, as a rebuild
			// numbers them.
			rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: fnName + "#pending-" + strconv.Itoa(i), Function: fnName, Namespace: ns,
				Reason: r.Reason, ReasonCode: r.ReasonCode, Since: r.PendingSince})
			i++
		}
		fr.Pending = i
		rep.Functions = append(rep.Functions, fr)
		if v.Plan.Autoscaled || v.Spec.Scale.Zero || v.ScaledUp+v.ScaledDown > 0 {
			rep.Stats.Autoscaler = append(rep.Stats.Autoscaler, scheduler.ScaleActions{Function: fnName, Namespace: ns, Up: v.ScaledUp, Down: v.ScaledDown})
		}
	}
	for _, k := range sortedKeys(st.drains) {
		if d := st.drains[k]; !drained[k] {
			_, name := splitKey(d.fn)
			describe(d.ns, name, d.group, nil, nil, d.ids)
		}
	}
	rep.Nodes = scheduler.NodeReports(st.core.Usage(), st.core.Cache(), func(id string, rr *scheduler.ReplicaReport) {
		if o, ok := owners[id]; ok {
			rr.ID, rr.Function, rr.Namespace, rr.Ready, rr.ReadyAfterSeconds = o.id, o.fn, o.ns, o.ready, o.readyAfter
			rr.ModelLoadSeconds = b.modelLoadsOf(o.id)
		}
	})
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			sort.Slice(g.Replicas, func(i, j int) bool { return g.Replicas[i].ID < g.Replicas[j].ID })
		}
	}
	// The core's cache counts the loads of its own bookings, which every
	// rebuild makes again; the counters this instance keeps do not.
	rep.Cache.Hits, rep.Cache.NodeHits, rep.Cache.Misses = b.cacheHits.Load(), 0, b.cacheMisses.Load()
	return rep
}

// paired is one booking of a group and the pod taken for it (nil: none
// yet); pos is its place among the bookings paired in order, -1 for a
// warm replica's tied pod.
type paired struct {
	id  string
	pod *corev1.Pod
	pos int
}

// pairPods pairs the bookings of one group with its pods. A Deployment's
// pods are not tied to bookings, except a warm replica's pod (warmPod):
// the others are paired in order, bookings in service first (ready ones,
// then starting ones, each by ID: state.liveOrder), then
// warm ones not tied yet, then draining ones, with the group's pods ready
// ones first (groupPods). The report names bookings after their pods, and
// what a pod says it holds goes to its booking's cache (feedModels).
// Called with b.mu held, or on a standby's rebuilt view.
func (b *Backend) pairPods(st *state, ns, group string, live, warm, draining []string) []paired {
	all := b.groupPods(ns, group)
	var out []paired
	kept := map[string]string{}
	for _, id := range warm {
		if pod := st.warmPod[id]; pod != "" {
			kept[pod] = id
		}
	}
	tied := map[string]bool{}
	pods := make([]*corev1.Pod, 0, len(all))
	for _, p := range all {
		if id, ok := kept[p.Name]; ok {
			out = append(out, paired{id: id, pod: p, pos: -1})
			tied[id] = true
			continue
		}
		pods = append(pods, p)
	}
	var untied []string
	for _, id := range warm {
		if !tied[id] {
			untied = append(untied, id)
		}
	}
	drainingSorted := append([]string(nil), draining...)
	sort.Strings(drainingSorted)
	untiedSorted := append([]string(nil), untied...)
	sort.Strings(untiedSorted)
	i := 0
	for _, ids := range [][]string{st.liveOrder(live), untiedSorted, drainingSorted} {
		for _, id := range ids {
			pr := paired{id: id, pos: i}
			if i < len(pods) {
				pr.pod = pods[i]
			}
			out = append(out, pr)
			i++
		}
	}
	return out
}

// servingLocked says, for the state's loop (state.reportReady), which
// bookings in service of a group have a ready pod paired with them
// (pairPods). Called with b.mu held.
func (b *Backend) servingLocked(st *state) func(ns string, g *group) []string {
	return func(ns string, g *group) []string {
		var draining []string
		if d := st.drains[fnKey(ns, g.name)]; d != nil {
			draining = d.ids
		}
		var out []string
		for _, pr := range b.pairPods(st, ns, g.name, g.ids, g.warm, draining) {
			// Positions 0 to len(g.ids)-1 are the bookings in service;
			// -1 the warm ones tied to their pods (a standby's is ready
			// once that pod is).
			if pr.pos < len(g.ids) && pr.pod != nil && podReady(pr.pod) {
				out = append(out, pr.id)
			}
		}
		return out
	}
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
	sortPods(pods)
	return pods
}
