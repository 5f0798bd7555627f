package k8s

import (
	"sort"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
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
// replica is booked again exactly where it runs (scheduler.Allocator's
// Restore), oldest function first, so nothing is placed twice. Pods still
// running for a group that has no Deployment any more (deleted while they
// terminate), or beyond their Deployment's count, keep their GPU share
// booked until they are gone. A replica whose GPU is gone is pending and
// placed again.
func restoreState(objs clusterObjects, store *profiles.Store, now time.Time, log *zap.Logger) *state {
	s := newState(objs.inventory, store, log)
	log = s.log

	for _, svc := range objs.records {
		spec, desired, err := decodeRecord(svc)
		if err != nil {
			log.Error("function record unreadable; its replicas are removed", zap.Error(err))
			continue
		}
		pl, err := s.planFor(spec)
		if err != nil {
			log.Warn("the function's profile changed; keeping its stored request", zap.String("function", spec.Name()), zap.Error(err))
			pl = fallbackPlan(spec, err)
		}
		s.functions[fnKey(spec.Namespace(), spec.Name())] = &function{
			spec: spec, plan: pl, desired: desired, createdAt: svc.CreationTimestamp.UTC(), groups: map[string]*group{},
		}
	}

	// Pods per group that may still use their GPU.
	type podGroup struct {
		count     int
		placement string
	}
	pods := map[string]*podGroup{}
	for _, p := range objs.pods {
		g := p.Labels[LabelGroup]
		if g == "" || podFinished(p) {
			continue
		}
		pg, ok := pods[fnKey(p.Namespace, g)]
		if !ok {
			pg = &podGroup{placement: p.Annotations[AnnotationPlacement]}
			pods[fnKey(p.Namespace, g)] = pg
		}
		pg.count++
	}

	deps := append([]*appsv1.Deployment(nil), objs.deployments...)
	sort.Slice(deps, func(i, j int) bool {
		fi, fj := s.functions[fnKey(deps[i].Namespace, deps[i].Labels[LabelFunction])], s.functions[fnKey(deps[j].Namespace, deps[j].Labels[LabelFunction])]
		if (fi == nil) != (fj == nil) {
			return fi == nil // orphans first: their pods run now
		}
		if fi != nil && fj != nil && !fi.createdAt.Equal(fj.createdAt) {
			return fi.createdAt.Before(fj.createdAt)
		}
		return deps[i].Namespace+"/"+deps[i].Name < deps[j].Namespace+"/"+deps[j].Name
	})
	withDeployment := map[string]bool{}
	for _, d := range deps {
		withDeployment[fnKey(d.Namespace, d.Name)] = true
		rec, err := decodePlacement(d.Annotations[AnnotationPlacement])
		if err != nil {
			log.Error("deployment's placement unreadable; it is removed", zap.String("deployment", d.Namespace+"/"+d.Name), zap.Error(err))
			continue
		}
		n := 0
		if d.Spec.Replicas != nil {
			n = int(*d.Spec.Replicas)
		}
		running := 0
		if pg := pods[fnKey(d.Namespace, d.Name)]; pg != nil {
			running = pg.count
		}
		fn := s.functions[fnKey(d.Namespace, d.Labels[LabelFunction])]
		dk := fnKey(d.Namespace, d.Name)
		if fn == nil {
			// The function is gone; its pods keep their GPU until they stop.
			s.restoreDrain("", d.Namespace, d.Name, rec, max(n, running), log)
			continue
		}
		g := &group{name: d.Name, placement: rec.Placement, config: rec.Config}
		for range n {
			id := newReplicaID(d.Name)
			if err := s.alloc.Restore(id, rec.Placement); err != nil {
				log.Warn("replica not restored; it is placed again", zap.String("deployment", dk), zap.Error(err))
				fn.pending = append(fn.pending, &pendingReplica{id: newReplicaID(fn.spec.Name()), config: rec.Config, since: now.UTC()})
				continue
			}
			g.ids = append(g.ids, id)
			s.cache.Preload(id, fn.plan.Request.Model, modelBytes(fn.plan), now)
		}
		if len(g.ids) > 0 {
			fn.groups[g.name] = g
		}
		if running > n {
			s.restoreDrain(fn.key(), d.Namespace, d.Name, rec, running-n, log)
		}
	}
	for k, pg := range pods {
		if withDeployment[k] {
			continue
		}
		rec, err := decodePlacement(pg.placement)
		if err != nil {
			continue
		}
		ns, name := splitKey(k)
		s.restoreDrain("", ns, name, rec, pg.count, log)
	}

	for _, fn := range s.sortedFunctions() {
		s.setDesired(fn, fn.desired, now)
	}
	return s
}

// restoreDrain books n replicas of a group that is on its way out.
func (s *state) restoreDrain(fn, ns, group string, rec placementRecord, n int, log *zap.Logger) {
	if n <= 0 {
		return
	}
	d, ok := s.drains[fnKey(ns, group)]
	if !ok {
		d = &drain{fn: fn, ns: ns, group: group}
	}
	for range n {
		id := newReplicaID(group)
		if err := s.alloc.Restore(id, rec.Placement); err != nil {
			log.Debug("draining replica not booked", zap.String("group", group), zap.Error(err))
			continue
		}
		d.ids = append(d.ids, id)
	}
	if len(d.ids) > 0 {
		s.drains[fnKey(ns, group)] = d
	}
}

// adoptStray books, as draining, pods of faas-gpu's groups that may run
// on a GPU without a booking: those left on a node that was lost (its
// bookings went with it) and came back before they were gone. Their
// shares are freed as they stop, like any drain.
func (s *state) adoptStray(pods []*corev1.Pod) {
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
		if _, ok := s.functions[st.fn]; ok {
			fn = st.fn
		}
		s.log.Info("pods without a GPU booking (a lost node back): booked until they stop", zap.String("group", k), zap.Int("pods", st.n-booked))
		s.restoreDrain(fn, ns, group, rec, st.n-booked, s.log)
	}
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
