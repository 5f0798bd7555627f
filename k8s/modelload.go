package k8s

import (
	"net"
	"strconv"

	"github.com/faas-gpu/faas-gpu/internal/modelload"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
)

// ReplicaModelLoads keeps what a pod says its model loads took
// (handlers.ModelLoadReporter), for /system/gpus. Only a pod the proxy
// routes to is kept, and the informer forgets it with the pod, as it does
// the pod's models.
func (b *Backend) ReplicaModelLoads(replicaID string, seconds map[string]float64) {
	if _, ok := b.podModel.Load(replicaID); ok {
		b.podLoads.Store(replicaID, seconds)
	}
}

// modelLoadsOf is what pod name said its loads took; nil when it did not.
func (b *Backend) modelLoadsOf(name string) map[string]float64 {
	if v, ok := b.podLoads.Load(name); ok {
		return v.(map[string]float64)
	}
	return nil
}

// sendLoadsLocked sends the model loads the core asked since the last
// pass (lifecycle.LoadModel, docs/replica-protocol.md "POST /_/models")
// to the pods their bookings are paired with (pairPods), each beside
// everything else: a pod answers once the model is in, with its list,
// which is taken as the proxy takes a pod's word (ReplicaModels), for the
// loop to feed to the core's cache under the pod's booking. A pod that
// does not take loads is not asked again; a booking without a ready pod
// is asked again by the core once the load's deadline passes.
func (b *Backend) sendLoadsLocked(st *state) {
	loads := st.loads
	st.loads = nil
	for _, e := range loads {
		pod := b.podOfBooking(st, e.Function, e.Replica.ID)
		if pod == nil {
			continue
		}
		if _, no := b.takesNoLoads.Load(pod.UID); no {
			continue
		}
		url := "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(podPort(pod, b.cfg.FunctionPort)))
		name, uid, model := pod.Name, pod.UID, e.Model
		go func() {
			a := modelload.Ask(b.ctx, url, model, st.stats, b.log, zap.String("pod", name))
			if a.NotSpoken {
				b.takesNoLoads.Store(uid, true)
			}
			if !a.Loaded {
				return
			}
			b.ReplicaModels(name, a.List.Models)
			if len(a.List.LoadSeconds) > 0 {
				b.ReplicaModelLoads(name, a.List.LoadSeconds)
			}
		}()
	}
}

// podOfBooking is the ready pod booking id of function fn is paired with
// (pairPods); nil for none.
func (b *Backend) podOfBooking(st *state, fn, id string) *corev1.Pod {
	v, ok := st.core.Function(fn)
	if !ok {
		return nil
	}
	ns := v.Spec.Namespace()
	for _, g := range st.groups(v) {
		if st.groupOf[id] != g.name {
			continue
		}
		var draining []string
		if d, ok := st.drains[fnKey(ns, g.name)]; ok {
			draining = d.ids
		}
		for _, pr := range b.pairPods(st, ns, g.name, g.ids, g.warm, draining) {
			if pr.id == id && pr.pod != nil && podReady(pr.pod) && pr.pod.Status.PodIP != "" {
				return pr.pod
			}
		}
	}
	return nil
}

// ModelLoadSeconds is model's profiled load time on the cluster's main
// GPU product (handlers.ModelLoadTimer); 0 when unknown.
func (b *Backend) ModelLoadSeconds(model string) float64 {
	product := ""
	if p := b.product.Load(); p != nil {
		product = *p
	}
	return b.cfg.Profiles.LoadSeconds(model, product)
}
