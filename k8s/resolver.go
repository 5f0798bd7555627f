package k8s

import (
	"net"
	"sort"
	"strconv"
	"sync/atomic"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
)

// countCache counts one request's cache outcome: a hit when a ready pod
// holds its model (the router prefers such a pod), a miss when none does
// and the pod it goes to must load the model. A request with no pod to go
// to is answered 503 and loads nothing.
func (b *Backend) countCache(eps []scheduler.Endpoint, model string) {
	if len(eps) == 0 {
		return
	}
	for _, ep := range eps {
		if b.Holds(ep.ID, model) {
			b.cacheHits.Add(1)
			return
		}
	}
	b.cacheMisses.Add(1)
}

// Replicas lists the ready pods again, for the proxy's dispatcher.
func (b *Backend) Replicas(ns, name string) ([]scheduler.Endpoint, error) {
	if _, err := b.functionModel(ns, name); err != nil {
		return nil, err
	}
	return b.endpoints(ns, name, ""), nil
}

// backlog is what waits for function k beyond what its pods serve at once,
// the autoscaler's Backlog (as in local mode): requests in flight at a pod
// above its batch size, plus those the dispatcher queues.
func (b *Backend) backlog(k string) float64 {
	ns, name := splitKey(k)
	n := 0
	for _, p := range b.functionPods(ns, name) {
		v, ok := b.inflight.Load(p.UID)
		if !ok {
			continue
		}
		batch := 1
		if rec, err := decodePlacement(p.Annotations[AnnotationPlacement]); err == nil {
			batch = max(rec.Config.Batch, 1)
		}
		n += max(int(v.(*atomic.Int64).Load())-batch, 0)
	}
	_, _, queued := b.load(k)
	return float64(n + queued)
}

// Holds reports whether a pod has model in memory. A pod loads its
// function's model when it starts; what else it loaded is not known here.
func (b *Backend) Holds(replicaID, model string) bool {
	m, ok := b.podModel.Load(replicaID)
	return ok && model != "" && m.(string) == model
}

func (b *Backend) endpoints(ns, name, model string) []scheduler.Endpoint {
	pods := b.functionPods(ns, name)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	eps := make([]scheduler.Endpoint, 0, len(pods))
	for _, p := range pods {
		if !podReady(p) {
			continue
		}
		pm := p.Annotations[AnnotationModel]
		b.podModel.Store(p.Name, pm)
		eps = append(eps, scheduler.Endpoint{
			ID:       p.Name,
			URL:      "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(podPort(p, b.cfg.FunctionPort))),
			InFlight: b.inFlight(p),
			Models:   1,
		})
	}
	return eps
}

// inFlight is the pod's count of requests in flight, kept by this
// instance for as long as the pod exists.
func (b *Backend) inFlight(p *corev1.Pod) *atomic.Int64 {
	if v, ok := b.inflight.Load(p.UID); ok {
		return v.(*atomic.Int64)
	}
	v, _ := b.inflight.LoadOrStore(p.UID, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// podPort is the watchdog's port in the pod, as rendered.
func podPort(p *corev1.Pod, def int) int {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "http" {
				return int(port.ContainerPort)
			}
		}
	}
	return def
}

// functionModel is the model of a function that exists: from the leader's
// state, else from its record in the informer.
func (b *Backend) functionModel(ns, name string) (string, error) {
	req, err := b.functionRequest(ns, name)
	return req.Model, err
}
