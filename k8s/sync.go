package k8s

import (
	"context"
	"fmt"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
)

// syncFunction makes function k's objects in the cluster match the
// leader's decisions: the placeholder pods of its GPUs first (so the
// device plugin cannot hand those GPUs out meanwhile), its Service record,
// one Deployment per group. A group taken away is scaled to zero and kept
// until its drain ends (the Deployment controller has seen the zero and the
// pods are gone: see groupSettledLocked), then deleted; deleting at once
// could race with the controller creating a ReplicaSet from an older view.
// A function that is gone loses its record at once. Idempotent: an object
// already as rendered is not written. Only the writer calls it (queue.go),
// so no two writes of a function overlap.
func (b *Backend) syncFunction(ctx context.Context, k string) error {
	done, err := b.beginWrite()
	if err != nil {
		return err
	}
	defer done()

	ns, name := splitKey(k)
	b.mu.Lock()
	st := b.st
	if st == nil {
		b.mu.Unlock()
		return b.standbyError()
	}
	if b.held[k] {
		// An open change placed it: written once that change is answered.
		b.mu.Unlock()
		return nil
	}
	v, exists := st.core.Function(k)
	var record *corev1.Service
	var groups []groupSpec
	if exists {
		record, err = renderRecord(v.Spec, v.Desired, b.cfg.FunctionPort)
		groups = st.groupSpecs(k)
	}
	draining := map[string]bool{}
	for _, d := range st.drains {
		if d.ns == ns {
			draining[d.group] = true
		}
	}
	// A group whose evicted warm pod is still there is kept, at zero,
	// until the pod is gone, as a drained group is: deleting it at once
	// would leave a Deployment being deleted that still counts the pod.
	for key, e := range st.evictions {
		if pns, _ := splitKey(key); pns == ns && e.fn == k {
			draining[e.group] = true
		}
	}
	written := sortedKeys(b.written[k])
	warm := st.warmPlan(k)
	opts := renderOptions{MPSPipeDir: b.cfg.MPSPipeDir, RuntimeClass: b.cfg.RuntimeClass, ImagePullPolicy: b.cfg.ImagePullPolicy, Port: b.cfg.FunctionPort, ModelStore: b.cfg.ModelStore}
	parked := b.planParkedLocked(st, k, groups, opts)
	unheld := groups
	groups = b.holdForEvictions(st, groups)
	b.mu.Unlock()
	// Begun whatever this write comes to: the plan marked them begun.
	for _, job := range parked.handOver {
		go b.runHandOver(st, k, job)
	}
	if err != nil {
		return err
	}

	if exists {
		for _, g := range groups {
			for _, u := range g.Placement.GPUs {
				if err := b.ensureReservation(ctx, u, g.Placement.Node); err != nil {
					return err
				}
			}
		}
		if err := b.applyService(ctx, record); err != nil {
			return err
		}
	} else if err := b.client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s/%s: %w", ns, name, err)
	}

	want := map[string]bool{}
	for i, g := range groups {
		d := renderDeployment(g, opts)
		if g.Replicas < unheld[i].Replicas && g.Replicas == 0 {
			if _, err := b.deps.in(ns).Deployments(ns).Get(d.Name); err != nil {
				// Held back for an evicted pod: created once it is gone.
				want[d.Name] = true
				continue
			}
		}
		if err := b.applyDeployment(ctx, d); err != nil {
			return err
		}
		want[d.Name] = true
		b.noteWritten(k, d.Name, true)
	}
	existing := map[string]bool{}
	for _, d := range b.functionDeployments(ns, name) {
		existing[d.Name] = true
	}
	for _, n := range written {
		existing[n] = true
	}
	for _, n := range sortedKeys(existing) {
		switch {
		case want[n]:
		case draining[n]:
			if err := b.scaleToZero(ctx, ns, n); err != nil {
				return err
			}
		default:
			err := b.client.AppsV1().Deployments(ns).Delete(ctx, n, foreground)
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete deployment %s/%s: %w", ns, n, err)
			}
			b.noteWritten(k, n, false)
			b.log.Info("replica group removed", zap.String("function", name), zap.String("namespace", ns), zap.String("deployment", n))
		}
	}
	if err := b.syncWarm(ctx, k, warm); err != nil {
		return err
	}
	return b.syncParked(ctx, k, parked)
}

// holdForEvictions keeps each group on a GPU an evicted warm pod still
// runs on (heldGPUs) at the count its Deployment has: the allocator gave
// that pod's memory away, and the new replica must not start beside it.
// Called under b.mu; the loop writes the group again until the pod is
// gone (checkDrains).
func (b *Backend) holdForEvictions(st *state, groups []groupSpec) []groupSpec {
	busy := b.heldGPUsLocked(st)
	if len(busy) == 0 {
		return groups
	}
	out := make([]groupSpec, len(groups))
	for i, g := range groups {
		out[i] = g
		ns := g.Function.Namespace()
		if !heldFor(busy, g.Placement.GPUs, fnKey(ns, g.Name)) {
			continue
		}
		cur := 0
		if d, err := b.deps.in(ns).Deployments(ns).Get(g.Name); err == nil && d.Spec.Replicas != nil {
			cur = int(*d.Spec.Replicas)
		}
		if cur < g.Replicas {
			b.log.Debug("replica waits for an evicted warm pod to go", zap.String("deployment", ns+"/"+g.Name), zap.Int("replicas", cur), zap.Int("want", g.Replicas))
			out[i].Replicas = cur
		}
	}
	return out
}

// heldGPUsLocked is st.heldGPUs with the evicted pods the informer still
// has. Called with b.mu held.
func (b *Backend) heldGPUsLocked(st *state) map[string]map[string]bool {
	return st.heldGPUs(func(ns, pod string) bool {
		_, err := b.pods.in(ns).Pods(ns).Get(pod)
		return err == nil
	})
}

// heldFor says whether one of gpus is held for another group than
// namespace/group.
func heldFor(held map[string]map[string]bool, gpus []string, self string) bool {
	for _, u := range gpus {
		for by := range held[u] {
			if by != self {
				return true
			}
		}
	}
	return false
}

// warmPlan is what the writer needs of function k's warm replicas: each
// one's group and tied pod ("" when none yet), and the pods of warm
// replicas that went.
type warmPlan struct {
	replicas map[string]warmTie    // by replica ID
	evicted  map[string]evictedPod // by pod name
}

// evictedPod is a warm replica's pod to delete once its group, shrunk to
// size, has been acted on by the ReplicaSet controller.
type evictedPod struct {
	group string
	size  int
}

type warmTie struct {
	group, pod string
	// standby: started out of service and not ready yet; live is how
	// many bookings in service its group has (spareFor).
	standby bool
	live    int
}

func (s *state) warmPlan(k string) warmPlan {
	ns, _ := splitKey(k)
	p := warmPlan{replicas: map[string]warmTie{}, evicted: map[string]evictedPod{}}
	if v, ok := s.core.Function(k); ok {
		live := map[string]int{}
		for _, r := range v.Live {
			live[s.groupOf[r.ID]]++
		}
		for _, r := range v.Warm {
			if g := s.groupOf[r.ID]; g != "" {
				p.replicas[r.ID] = warmTie{group: g, pod: s.warmPod[r.ID], standby: r.Phase == lifecycle.Starting, live: live[g]}
			}
		}
	}
	for key, e := range s.evictions {
		if pns, pod := splitKey(key); pns == ns && e.fn == k {
			p.evicted[pod] = evictedPod{group: e.group, size: s.groupSize(k, e.group)}
		}
	}
	return p
}

// syncWarm carries out function k's demotes, promotes and evictions on its
// pods, after its Deployments have their counts: a warm replica without a
// pod gets its group's newest pod in service, labelled out of routing; a
// labelled pod whose replica is back in service is unlabelled; the pod of
// a warm replica that went is deleted (its Deployment has just shrunk by
// one, and the pod's deletion cost made the ReplicaSet controller choose
// it already; deleting it makes sure).
func (b *Backend) syncWarm(ctx context.Context, k string, plan warmPlan) error {
	ns, name := splitKey(k)
	api := b.client.CoreV1().Pods(ns)
	for pod, ev := range plan.evicted {
		cur, err := b.pods.in(ns).Pods(ns).Get(pod)
		if err != nil {
			// Gone: what waited for its GPU may start.
			b.mu.Lock()
			if b.st != nil {
				delete(b.st.evictions, fnKey(ns, pod))
			}
			b.mu.Unlock()
			continue
		}
		b.mu.Lock()
		shrunk := b.replicaSetsAtMostLocked(ns, ev.group, ev.size)
		b.mu.Unlock()
		if cur.DeletionTimestamp != nil || !shrunk {
			// Deleted already (the ReplicaSet controller chose it by its
			// deletion cost), or deleting it now would have the
			// controller, still at the old count, replace it: the loop
			// comes back.
			continue
		}
		err = api.Delete(ctx, pod, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete warm pod %s/%s: %w", ns, pod, err)
		}
		b.log.Info("warm replica's pod removed", zap.String("function", name), zap.String("namespace", ns), zap.String("deployment", ev.group), zap.String("pod", pod))
	}
	pods := b.functionPods(ns, name)
	byName := map[string]*corev1.Pod{}
	tied := map[string]bool{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	for _, t := range plan.replicas {
		if p := byName[t.pod]; p != nil && p.DeletionTimestamp == nil {
			tied[t.pod] = true
		}
	}
	for _, id := range sortedKeys(plan.replicas) {
		t := plan.replicas[id]
		p := byName[t.pod]
		if p == nil || p.DeletionTimestamp != nil {
			if t.standby {
				p = spareFor(pods, t.group, tied, plan.evicted, t.live)
			} else {
				p = newestFree(pods, t.group, tied, plan.evicted)
			}
			if p == nil {
				continue // its pod is not created yet: tied on a later write
			}
			tied[p.Name] = true
		}
		if !podWarm(p) || p.Annotations[annotationDeletionCost] != warmDeletionCost {
			if _, err := api.Patch(ctx, p.Name, types.MergePatchType, warmPatch(true), metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("mark pod %s/%s warm: %w", ns, p.Name, err)
			}
			b.log.Info("replica kept warm: its pod is out of routing", zap.String("function", name), zap.String("namespace", ns), zap.String("pod", p.Name))
		}
		// Tied once the label is written: the loop then confirms the
		// demote to the core, which releases the SM share it held until
		// now (state.confirmDemotes).
		b.mu.Lock()
		if b.st != nil {
			if cur, still := b.st.warmPod[id]; still && cur != p.Name {
				b.st.warmPod[id] = p.Name
				b.kick()
			}
		}
		b.mu.Unlock()
	}
	for _, p := range pods {
		if !podWarm(p) || tied[p.Name] || p.DeletionTimestamp != nil {
			continue
		}
		if _, gone := plan.evicted[p.Name]; gone {
			continue
		}
		if _, err := api.Patch(ctx, p.Name, types.MergePatchType, warmPatch(false), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("put pod %s/%s back in routing: %w", ns, p.Name, err)
		}
		b.log.Info("warm replica promoted: its pod is back in routing", zap.String("function", name), zap.String("namespace", ns), zap.String("pod", p.Name))
	}
	return nil
}

// replicaSetsAtMostLocked says whether the group's Deployment asks for at
// most size pods and its ReplicaSets' controller has acted on it. Called
// with b.mu held.
func (b *Backend) replicaSetsAtMostLocked(ns, group string, size int) bool {
	if d, err := b.deps.in(ns).Deployments(ns).Get(group); err == nil {
		if d.Spec.Replicas == nil || int(*d.Spec.Replicas) > size || d.Status.ObservedGeneration < d.Generation {
			return false
		}
	}
	rss, _ := b.rss.in(ns).ReplicaSets(ns).List(labels.SelectorFromSet(labels.Set{LabelGroup: group}))
	for _, rs := range rss {
		if rs.Status.ObservedGeneration < rs.Generation || rs.Spec.Replicas != nil && int(*rs.Spec.Replicas) > size {
			return false
		}
	}
	return true
}

// newestFree is the newest pod of group that no warm replica holds, is
// not going and not evicted, a ready one before one still starting (it
// has loaded its model): the one a demoted replica keeps.
func newestFree(pods []*corev1.Pod, group string, tied map[string]bool, evicted map[string]evictedPod) *corev1.Pod {
	var best *corev1.Pod
	for _, p := range pods {
		if p.Labels[LabelGroup] != group || tied[p.Name] || p.DeletionTimestamp != nil || podFinished(p) {
			continue
		}
		if _, gone := evicted[p.Name]; gone {
			continue
		}
		if best == nil || newer(p, best) {
			best = p
		}
	}
	return best
}

// spareFor is the pod a standby of group keeps: one beyond the live
// bookings in service there, so that no pod they are served on leaves
// routing for it, the newest still starting if any (it is labelled out of
// routing before it is ready, so it never serves), else the newest. nil
// while the group has no such pod yet.
func spareFor(pods []*corev1.Pod, group string, tied map[string]bool, evicted map[string]evictedPod, live int) *corev1.Pod {
	var free []*corev1.Pod
	for _, p := range pods {
		if p.Labels[LabelGroup] != group || tied[p.Name] || p.DeletionTimestamp != nil || podFinished(p) {
			continue
		}
		if _, gone := evicted[p.Name]; gone {
			continue
		}
		free = append(free, p)
	}
	if len(free) <= live {
		return nil
	}
	var best *corev1.Pod
	for _, p := range free {
		if best == nil || podReady(p) != podReady(best) && !podReady(p) || podReady(p) == podReady(best) && newer(p, best) {
			best = p
		}
	}
	return best
}

// scaleToZero stops a group's pods, keeping its Deployment until they are
// gone.
func (b *Backend) scaleToZero(ctx context.Context, ns, name string) error {
	if cur, err := b.deps.in(ns).Deployments(ns).Get(name); err == nil && cur.Spec.Replicas != nil && *cur.Spec.Replicas == 0 {
		return nil
	}
	api := b.client.AppsV1().Deployments(ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Spec.Replicas != nil && *cur.Spec.Replicas == 0 {
			return nil
		}
		cur.Spec.Replicas = ptr(int32(0))
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("scale deployment %s/%s to zero: %w", ns, name, err)
	}
	return nil
}

func (b *Backend) noteWritten(k, dep string, present bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if present {
		if b.written[k] == nil {
			b.written[k] = map[string]bool{}
		}
		b.written[k][dep] = true
		return
	}
	delete(b.written[k], dep)
	if len(b.written[k]) == 0 {
		delete(b.written, k)
	}
}

// foreground deletes a Deployment only after its ReplicaSets, and those
// after their pods.
var foreground = metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationForeground)}

// applyDeployment creates d or updates the Deployment to it, keeping what
// others put there (the controller's revision annotation).
func (b *Backend) applyDeployment(ctx context.Context, d *appsv1.Deployment) error {
	same := func(cur *appsv1.Deployment) bool {
		return cur.DeletionTimestamp == nil && cur.Annotations[AnnotationSpecHash] == d.Annotations[AnnotationSpecHash] &&
			cur.Spec.Replicas != nil && *cur.Spec.Replicas == *d.Spec.Replicas
	}
	if cur, err := b.deps.in(d.Namespace).Deployments(d.Namespace).Get(d.Name); err == nil && same(cur) {
		return nil
	}
	api := b.client.AppsV1().Deployments(d.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, d.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, d, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, d.Name, err)
			}
			if err == nil {
				b.noteDeploymentChanged(d.Namespace, d.Name)
				b.log.Info("replica group created", zap.String("deployment", d.Namespace+"/"+d.Name),
					zap.String("node", d.Annotations[AnnotationNode]), zap.String("gpus", d.Annotations[AnnotationGPUs]),
					zap.String("sm", d.Annotations[AnnotationSMPercent]), zap.Int32("replicas", *d.Spec.Replicas))
			}
			return err
		}
		if err != nil {
			return err
		}
		if same(cur) {
			return nil
		}
		if cur.DeletionTimestamp != nil {
			return fmt.Errorf("deployment %s/%s is being deleted; it is created again once gone", d.Namespace, d.Name)
		}
		cur.Labels = merge(cur.Labels, d.Labels)
		cur.Annotations = merge(cur.Annotations, d.Annotations)
		cur.Spec.Replicas = d.Spec.Replicas
		cur.Spec.Strategy = d.Spec.Strategy
		cur.Spec.RevisionHistoryLimit = d.Spec.RevisionHistoryLimit
		cur.Spec.Template = d.Spec.Template
		if _, err = api.Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
			b.noteDeploymentChanged(d.Namespace, d.Name)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("write deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// noteDeploymentChanged counts Deployment ns/name created or updated:
// from then its pods may run the bookings the state holds.
func (b *Backend) noteDeploymentChanged(ns, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.lastWrite == nil {
		b.lastWrite = map[string]uint64{}
	}
	b.writeSeq++
	b.lastWrite[fnKey(ns, name)] = b.writeSeq
}

// applyService creates the function's Service record or updates it.
func (b *Backend) applyService(ctx context.Context, s *corev1.Service) error {
	if cur, err := b.svcs.in(s.Namespace).Services(s.Namespace).Get(s.Name); err == nil && cur.Annotations[AnnotationSpecHash] == s.Annotations[AnnotationSpecHash] {
		return nil
	}
	api := b.client.CoreV1().Services(s.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err := api.Create(ctx, s, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(schema.GroupResource{Resource: "services"}, s.Name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if cur.Labels[LabelManagedBy] != managedBy {
			// Someone else's Service of that name: never take it over.
			return &gpu.FieldError{Field: "service", Reason: fmt.Sprintf("a Service %s/%s exists that faas-gpu did not make; remove it or choose another name", s.Namespace, s.Name)}
		}
		if cur.Annotations[AnnotationSpecHash] == s.Annotations[AnnotationSpecHash] {
			return nil
		}
		cur.Labels = merge(cur.Labels, s.Labels)
		cur.Annotations = merge(cur.Annotations, s.Annotations)
		cur.Spec.Selector = s.Spec.Selector
		cur.Spec.Ports = s.Spec.Ports
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("write service %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

func merge(dst, src map[string]string) map[string]string {
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}

// newer orders the pods a warm replica may keep: ready first, then by
// creation, newest first, then by name.
func newer(p, q *corev1.Pod) bool {
	if rp, rq := podReady(p), podReady(q); rp != rq {
		return rp
	}
	if !p.CreationTimestamp.Equal(&q.CreationTimestamp) {
		return q.CreationTimestamp.Before(&p.CreationTimestamp)
	}
	return p.Name > q.Name
}
