package k8s

import (
	"sort"
	"strconv"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// clusterObjects are what the state is rebuilt from.
type clusterObjects struct {
	inventory   gpu.Inventory
	records     []*corev1.Service
	deployments []*appsv1.Deployment
	pods        []*corev1.Pod
}

// restoreState rebuilds the provider's decisions from the cluster. The
// placement annotations on Deployments are the source of truth: each
// group's replicas come back to the core (lifecycle.Core.Restore) booked
// exactly where they run, so nothing is placed twice. Pods still running
// for a group that has no Deployment any more (deleted while they
// terminate), or beyond their Deployment's count, keep their GPU share
// booked as draining until they are gone. A replica whose GPU is gone is
// pending and placed again. It returns the functions whose record or
// groups the rebuild changed.
func restoreState(objs clusterObjects, opts lifecycle.Options, now time.Time, log *zap.Logger) (*state, map[string]bool) {
	s := newState(objs.inventory, opts, log)
	log = s.log

	recs := map[string]*lifecycle.Record{}
	for _, svc := range objs.records {
		spec, desired, err := decodeRecord(svc)
		if err != nil {
			log.Error("function record unreadable; its replicas are removed", zap.Error(err))
			continue
		}
		recs[fnKey(spec.Namespace(), spec.Name())] = &lifecycle.Record{Function: spec, Replicas: desired, CreatedAt: svc.CreationTimestamp.UTC()}
	}

	// Pods per group that may still use their GPU, in the order replicas
	// are named after them.
	pods := map[string][]*corev1.Pod{}
	placements := map[string]string{}
	for _, p := range objs.pods {
		g := p.Labels[LabelGroup]
		if g == "" || podFinished(p) {
			continue
		}
		k := fnKey(p.Namespace, g)
		pods[k] = append(pods[k], p)
		if placements[k] == "" {
			placements[k] = p.Annotations[AnnotationPlacement]
		}
	}
	for _, ps := range pods {
		sortPods(ps)
	}

	type drainBooking struct {
		fn, ns, group string
		rec           placementRecord
		ids           []string
	}
	var orphans, extras []drainBooking
	// named: the group each restored replica was in, and where it ran.
	type restored struct {
		group string
		rec   placementRecord
	}
	named := map[string]restored{}
	warmPods := map[string]string{}
	deps := append([]*appsv1.Deployment(nil), objs.deployments...)
	sort.Slice(deps, func(i, j int) bool {
		return deps[i].Namespace+"/"+deps[i].Name < deps[j].Namespace+"/"+deps[j].Name
	})
	withDeployment := map[string]bool{}
	for _, d := range deps {
		dk := fnKey(d.Namespace, d.Name)
		withDeployment[dk] = true
		pr, err := decodePlacement(d.Annotations[AnnotationPlacement])
		if err != nil {
			log.Error("deployment's placement unreadable; it is removed", zap.String("deployment", dk), zap.Error(err))
			continue
		}
		n := 0
		if d.Spec.Replicas != nil {
			n = int(*d.Spec.Replicas)
		}
		// Pods adopted from parked ones (parked.go) are the group's
		// beyond what its Deployment runs.
		for _, p := range pods[dk] {
			if p.Labels[LabelAdopted] == "true" && p.DeletionTimestamp == nil {
				n++
			}
		}
		ids := restoredIDs(d.Namespace, d.Name, pods[dk], max(n, len(pods[dk])))
		fk := fnKey(d.Namespace, d.Labels[LabelFunction])
		rec := recs[fk]
		if rec == nil {
			// The function is gone; its pods keep their GPU until they stop.
			orphans = append(orphans, drainBooking{ns: d.Namespace, group: d.Name, rec: pr, ids: ids})
			continue
		}
		for i, id := range ids[:n] {
			// A pod labelled warm was kept for a warm replica: it comes
			// back warm, tied to that pod.
			idle := i < len(pods[dk]) && podWarm(pods[dk][i])
			rec.Placed = append(rec.Placed, lifecycle.PlacedReplica{ID: id, Placement: pr.Placement, Config: pr.Config, Idle: idle})
			named[id] = restored{group: d.Name, rec: pr}
			if idle {
				warmPods[id] = pods[dk][i].Name
			}
		}
		if len(ids) > n {
			extras = append(extras, drainBooking{fn: fk, ns: d.Namespace, group: d.Name, rec: pr, ids: ids[n:]})
		}
	}
	for _, k := range sortedKeys(pods) {
		if withDeployment[k] {
			continue
		}
		pr, err := decodePlacement(placements[k])
		if err != nil {
			continue
		}
		ns, name := splitKey(k)
		orphans = append(orphans, drainBooking{ns: ns, group: name, rec: pr, ids: restoredIDs(ns, name, pods[k], len(pods[k]))})
	}

	book := func(bs []drainBooking) {
		for _, b := range bs {
			for _, id := range b.ids {
				if err := s.core.RestoreDraining(id, b.fn, b.rec.Placement, b.rec.Config); err != nil {
					log.Debug("draining replica not booked", zap.String("group", b.group), zap.Error(err))
					continue
				}
				s.groupOf[id] = b.group
				s.drains[fnKey(b.ns, b.group)] = appendDrain(s.drains[fnKey(b.ns, b.group)], b.fn, b.ns, b.group, id)
			}
		}
	}
	// Orphans first: their pods run now.
	book(orphans)
	all := make([]lifecycle.Record, 0, len(recs))
	for _, k := range sortedKeys(recs) {
		all = append(all, *recs[k])
	}
	began := time.Now()
	res, report := s.core.Restore(all, now)
	for _, r := range report {
		if r.PlanErr != nil {
			log.Warn("the function's profile changed; keeping its stored request", zap.String("function", r.Function), zap.Error(r.PlanErr))
		}
		for id, err := range r.Lost {
			log.Warn("replica not restored; it is placed again", zap.String("function", r.Function), zap.String("replica", id), zap.Error(err))
		}
	}
	for _, e := range res.Effects {
		// A replica booked where it ran stays in its Deployment; one whose
		// GPU is gone was placed afresh and joins a group there.
		if n, ok := named[e.Replica.ID]; ok && e.Kind == lifecycle.Start && e.Replica.Placement != nil {
			_, fn := splitKey(e.Function)
			if groupName(fn, *e.Replica.Placement, e.Replica.Config) == groupName(fn, n.rec.Placement, n.rec.Config) {
				s.groupOf[e.Replica.ID] = n.group
			}
		}
	}
	dirty := s.apply(res, time.Since(began), now)
	for id, pod := range warmPods {
		if v, ok := s.core.Replica(id); ok && v.Phase == lifecycle.Warm {
			s.warmPod[id] = pod
		}
	}
	book(extras)
	// More replicas in the cluster than the record asks for (a change cut
	// short): the newest drain.
	for _, v := range s.core.Functions() {
		if len(v.Live) <= v.Desired {
			continue
		}
		ns, name := splitKey(v.Key)
		began := time.Now()
		res, _, err := s.core.Scale(ns, name, v.Desired, now)
		if err != nil {
			continue
		}
		for k := range s.apply(res, time.Since(began), now) {
			dirty[k] = true
		}
	}
	for _, k := range sortedKeys(recs) {
		s.refreshRequest(k) // a function with no replica had no effect
	}
	return s, dirty
}

func appendDrain(d *drain, fn, ns, group, id string) *drain {
	if d == nil {
		d = &drain{fn: fn, ns: ns, group: group}
	}
	d.ids = append(d.ids, id)
	return d
}

// restoredIDs names n replicas of a group after its pods, in order, and
// the rest <group>#<position>: a rebuild from the same cluster names them
// again so. The namespace keeps IDs of same-named groups apart.
func restoredIDs(ns, group string, pods []*corev1.Pod, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		if i < len(pods) {
			ids[i] = ns + "/" + pods[i].Name
		} else {
			ids[i] = ns + "/" + group + "#" + strconv.Itoa(i)
		}
	}
	return ids
}

// sortPods orders a group's pods as replicas are paired with them: ready
// ones, then starting ones, then terminating ones, each by name.
func sortPods(pods []*corev1.Pod) {
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
}

// strays are the pods of faas-gpu's groups that may run on a GPU without
// a booking: those left on a node that was lost (its bookings went with
// it) and came back before they were gone. setInventory books them as
// draining before it places anything there; their shares are freed as
// they stop, like any drain.
func (s *state) strays(pods []*corev1.Pod) []strayPod {
	type stray struct {
		fn, placement string
		n             int
	}
	groups := map[string]*stray{}
	for _, p := range pods {
		g := p.Labels[LabelGroup]
		if g == "" || podFinished(p) {
			continue
		}
		k := fnKey(p.Namespace, g)
		if groups[k] == nil {
			groups[k] = &stray{fn: fnKey(p.Namespace, p.Labels[LabelFunction]), placement: p.Annotations[AnnotationPlacement]}
		}
		groups[k].n++
	}
	var out []strayPod
	for _, k := range sortedKeys(groups) {
		st := groups[k]
		ns, group := splitKey(k)
		booked := s.groupSize(st.fn, group)
		if d, ok := s.drains[k]; ok {
			booked += len(d.ids)
		}
		if st.n <= booked {
			continue
		}
		rec, err := decodePlacement(st.placement)
		if err != nil {
			continue
		}
		fn := ""
		if s.core.Has(st.fn) {
			fn = st.fn
		}
		for range st.n - booked {
			out = append(out, strayPod{ns: ns, group: group, held: lifecycle.Held{ID: newReplicaID(k), Function: fn, Placement: rec.Placement, Config: rec.Config}})
		}
	}
	return out
}

// strayPod is one pod of group ns/group running without a booking.
type strayPod struct {
	ns, group string
	held      lifecycle.Held
}

// podFinished: a pod that can no longer use its GPU.
func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// podReady: a pod that takes requests now.
func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
