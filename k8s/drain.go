package k8s

import "k8s.io/apimachinery/pkg/labels"

// A replica taken away keeps its GPU share booked (state.drains) until
// groupSettledLocked says its pods are gone and none can come back.

// groupSettledLocked says whether a group shrinking to size (0: taken
// away, its Deployment scaled to zero) has no more pods than that and can
// get no more: the Deployment, as the informer shows it, asks for no more
// and its controller has acted on that, and so has its ReplicaSets'
// controller. Only then is the GPU share of the rest free. Called with
// b.mu held.
func (b *Backend) groupSettledLocked(ns, group string, size int) bool {
	sel := labels.SelectorFromSet(labels.Set{LabelGroup: group})
	pods, _ := b.pods.in(ns).Pods(ns).List(sel)
	n := 0
	for _, p := range pods {
		if !podFinished(p) {
			n++
		}
	}
	if n > size {
		return false
	}
	rss, _ := b.rss.in(ns).ReplicaSets(ns).List(sel)
	for _, rs := range rss {
		if rs.Status.ObservedGeneration < rs.Generation || rs.Spec.Replicas != nil && int(*rs.Spec.Replicas) > size || int(rs.Status.Replicas) > size {
			return false
		}
	}
	d, err := b.deps.in(ns).Deployments(ns).Get(group)
	if err != nil {
		// Gone (deleted by hand), or written but not yet seen.
		for k, deps := range b.written {
			if kns, _ := splitKey(k); kns == ns && deps[group] {
				return false
			}
		}
		return true
	}
	return d.Spec.Replicas != nil && int(*d.Spec.Replicas) <= size && d.Status.ObservedGeneration >= d.Generation && int(d.Status.Replicas) <= size
}

// deploymentMayExistLocked says whether a Deployment named group may be in
// the cluster: the informer shows it, or this instance wrote it and the
// informer may not show it yet. Called with b.mu held.
func (b *Backend) deploymentMayExistLocked(ns, group string) bool {
	if _, err := b.deps.in(ns).Deployments(ns).Get(group); err == nil {
		return true
	}
	for k, deps := range b.written {
		if kns, _ := splitKey(k); kns == ns && deps[group] {
			return true
		}
	}
	return false
}
