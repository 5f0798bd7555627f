package k8s

import (
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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

// podModels is what is known of a pod's GPU memory: its function's
// model, which it loads to become ready, and, once the pod has said so
// (docs/replica-protocol.md), the models it holds. A value is never
// changed once stored: a new one replaces it.
type podModels struct {
	own  string
	told []string // nil: the pod has said nothing
}

func (m *podModels) holds(model string) bool {
	if model == "" {
		return false
	}
	if m.told == nil {
		return m.own == model
	}
	return slices.Contains(m.told, model)
}

// count is how many models the pod holds, for the router.
func (m *podModels) count() int {
	if m.told == nil {
		return 1
	}
	return len(m.told)
}

// Holds reports whether a pod has model in memory: what the pod said it
// holds, else its function's model.
func (b *Backend) Holds(replicaID, model string) bool {
	m, ok := b.podModel.Load(replicaID)
	return ok && m.(*podModels).holds(model)
}

// ReplicaModels takes what a pod says it holds (handlers.ModelReporter):
// the proxy calls it per response, so it takes no lock. A pod not routed
// to (or gone since) is not recorded, so a late report leaks nothing.
func (b *Backend) ReplicaModels(replicaID string, models []string) {
	if models == nil {
		models = []string{}
	}
	for {
		v, ok := b.podModel.Load(replicaID)
		if !ok {
			return
		}
		old := v.(*podModels)
		if old.told != nil && slices.Equal(old.told, models) {
			return // said again: nothing for the loop
		}
		if b.podModel.CompareAndSwap(replicaID, old, &podModels{own: old.own, told: models}) {
			// Placement learns it too, from the loop (feedModels).
			b.modelsTold.Store(true)
			b.kick()
			return
		}
	}
}

// podModelsOf is pod name's record, made with its function's model own the
// first time the pod is routed to; what the pod said stays.
func (b *Backend) podModelsOf(name, own string) *podModels {
	if v, ok := b.podModel.Load(name); ok && v.(*podModels).own == own {
		return v.(*podModels)
	}
	v, _ := b.podModel.LoadOrStore(name, &podModels{own: own})
	return v.(*podModels)
}

func (b *Backend) endpoints(ns, name, model string) []scheduler.Endpoint {
	pods := b.functionPods(ns, name)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	eps := make([]scheduler.Endpoint, 0, len(pods))
	for _, p := range pods {
		// A warm replica's pod keeps its model for a scale-up, out of
		// routing until it is promoted.
		if !podReady(p) || podWarm(p) {
			continue
		}
		pm := b.podModelsOf(p.Name, p.Annotations[AnnotationModel])
		slice := b.sliceOf(p)
		eps = append(eps, scheduler.Endpoint{
			ID:         p.Name,
			URL:        "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(podPort(p, b.cfg.FunctionPort))),
			InFlight:   b.inFlight(p),
			Models:     pm.count(),
			Batch:      slice.Batch,
			Throughput: slice.Throughput,
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

// sliceOf is the pod's slice config from its placement annotation,
// decoded the first time the pod is routed to: a pod's placement does not
// change for its life. A pod without a readable one has no slice known
// (the dispatcher does not hold it back).
func (b *Backend) sliceOf(p *corev1.Pod) scheduler.SliceConfig {
	if v, ok := b.podSlice.Load(p.UID); ok {
		return v.(scheduler.SliceConfig)
	}
	var c scheduler.SliceConfig
	if rec, err := decodePlacement(p.Annotations[AnnotationPlacement]); err == nil {
		c = rec.Config
	}
	// The batch the pod was told (lifecycle.RenderEnv), the function's
	// own FAAS_GPU_BATCH included: pull dispatch hands it that many.
	if n := podBatch(p); n > 0 && c.Batch > 0 {
		c.Batch = n
	}
	b.podSlice.Store(p.UID, c)
	return c
}

// podBatch is the FAAS_GPU_BATCH the pod's container was given; 0 when
// none is readable.
func podBatch(p *corev1.Pod) int {
	for _, c := range p.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "FAAS_GPU_BATCH" {
				if n, err := strconv.Atoi(strings.TrimSpace(e.Value)); err == nil && n > 0 {
					return n
				}
			}
		}
	}
	return 0
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

// feedModels puts what pods said they hold (ReplicaModels,
// docs/replica-protocol.md) into the core's model cache, under the booking
// each pod is paired with (pairPods), so that placement's locality sees it
// as in local mode: the next replica of a function serving a model a pod
// holds goes to that pod's GPU where it fits. A pod that said nothing
// leaves its booking as the core has it; a list already fed to the same
// booking is not fed again. Called by the loop with b.mu held.
func (b *Backend) feedModels(st *state, now time.Time) {
	c := st.core.Cache()
	for _, v := range st.core.Functions() {
		ns := v.Spec.Namespace()
		for _, g := range st.groups(v) {
			var draining []string
			if d, ok := st.drains[fnKey(ns, g.name)]; ok {
				draining = d.ids
			}
			for _, pr := range b.pairPods(st, ns, g.name, g.ids, g.warm, draining) {
				if pr.pod == nil {
					continue
				}
				m, ok := b.podModel.Load(pr.pod.Name)
				if !ok {
					continue
				}
				told := m.(*podModels).told
				if prev, done := st.fed[pr.id]; told == nil || done && slices.Equal(prev, told) {
					continue
				}
				if c.Report(pr.id, told, now) {
					st.fed[pr.id] = told
				}
			}
		}
	}
}
