package k8s

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Function pods share a GPU through MPS and do not ask the NVIDIA device
// plugin for nvidia.com/gpu (the plugin hands out whole GPUs). To keep the
// plugin from giving a GPU faas-gpu uses to another pod, every GPU holding
// a booking gets one placeholder pod on its node asking for
// nvidia.com/gpu: 1, as FaST-GShare does. The scheduler then counts that
// GPU as taken; docs/kubernetes.md says what this does and does not
// guarantee.

// ensureReservation makes sure the GPU has its placeholder before replicas
// are put on it.
func (b *Backend) ensureReservation(ctx context.Context, gpuUUID, node string) error {
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	if _, ok := b.resv[gpuUUID]; ok {
		b.resv[gpuUUID] = time.Time{}
		return nil
	}
	name := reservationName(gpuUUID)
	if p, err := b.resvPods.Pods(b.cfg.Namespace).Get(name); err == nil && p.DeletionTimestamp == nil {
		b.resv[gpuUUID] = time.Time{}
		return nil
	}
	pod := renderReservation(b.cfg.Namespace, node, gpuUUID, b.cfg.ReservationImage)
	_, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("reserve GPU %s on %s: %w", gpuUUID, node, err)
	}
	if err == nil {
		b.log.Info("GPU reserved against the device plugin", zap.String("gpu", gpuUUID), zap.String("node", node), zap.String("pod", b.cfg.Namespace+"/"+name))
	}
	b.resv[gpuUUID] = time.Time{}
	return nil
}

// syncReservations gives every booked GPU its placeholder and removes the
// placeholders of GPUs unused for Options.ReservationGrace.
func (b *Backend) syncReservations(ctx context.Context, now time.Time) error {
	done, err := b.beginWrite()
	if err != nil {
		return err
	}
	defer done()
	b.resvMu.Lock()
	defer b.resvMu.Unlock()
	b.mu.Lock()
	if b.st == nil {
		b.mu.Unlock()
		return nil
	}
	want := b.st.reservedGPUs()
	b.mu.Unlock()

	has, _ := labels.NewRequirement(LabelReservation, selection.Exists, nil)
	pods, _ := b.resvPods.Pods(b.cfg.Namespace).List(labels.NewSelector().Add(*has))
	present := map[string]string{} // UUID -> pod name
	for _, p := range pods {
		if u := p.Annotations[AnnotationGPUs]; u != "" && p.DeletionTimestamp == nil {
			present[u] = p.Name
		}
	}
	for u := range b.resv {
		if _, ok := present[u]; !ok {
			present[u] = reservationName(u)
		}
	}
	for u, node := range want {
		b.resv[u] = time.Time{}
		if _, ok := present[u]; ok {
			continue
		}
		pod := renderReservation(b.cfg.Namespace, node, u, b.cfg.ReservationImage)
		if _, err := b.client.CoreV1().Pods(b.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("reserve GPU %s on %s: %w", u, node, err)
		}
	}
	for u, name := range present {
		if _, ok := want[u]; ok {
			continue
		}
		since, known := b.resv[u]
		if !known || since.IsZero() {
			b.resv[u] = now
			continue
		}
		if now.Sub(since) < b.cfg.ReservationGrace {
			continue
		}
		err := b.client.CoreV1().Pods(b.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("release GPU %s: %w", u, err)
		}
		delete(b.resv, u)
		b.log.Info("GPU reservation released", zap.String("gpu", u), zap.String("pod", b.cfg.Namespace+"/"+name))
	}
	return nil
}

// nodeObserver keeps what applying the agents' reports needs between
// passes: the clashes already logged, the nodes given a store, and the
// clash counter.
type nodeObserver struct {
	clashes *prometheus.CounterVec
	seen    map[string]string // GPU -> the pod it was last seen clashing with
	stores  map[string]bool   // nodes whose store the cache was given
}

func newNodeObserver() *nodeObserver {
	return &nodeObserver{
		clashes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "faas_gpu_gpu_clashes_total",
			Help: "GPUs holding faas-gpu replicas found held by another pod through the device plugin (the replicas are placed elsewhere), by node."}, []string{"node"}),
		seen: map[string]string{}, stores: map[string]bool{},
	}
}

// Collectors are the backend's own metrics, for the provider's registry.
func (b *Backend) Collectors() []prometheus.Collector {
	return []prometheus.Collector{b.nodeObs.clashes}
}

// observeNodes applies what the agents report beside the GPUs, before inv
// replaces st's inventory (b.mu held): the node stores go to the cache's
// node tier; each booked GPU's replicas follow the device its placeholder
// was given; a booked GPU another pod holds is a clash, logged and counted
// once, and inv no longer has it (nodeDevices), so the core places its
// replicas elsewhere. It reports whether a replica's device changed, so
// that every function is rendered again.
func (b *Backend) observeNodes(st *state, inv gpu.Inventory) bool {
	nodes, _ := b.nodes.List(labels.Everything())
	f := nodeFactsFrom(nodes, b.cfg.Namespace)
	if b.nodeObs == nil {
		b.nodeObs = newNodeObserver() // a Backend made without New, in tests
	}
	o := b.nodeObs
	c := st.core.Cache()
	for node := range o.stores {
		if _, ok := f.stores[node]; !ok {
			c.SetNodeStore(node, nil)
			delete(o.stores, node)
		}
	}
	for node, models := range f.stores {
		c.SetNodeStore(node, models)
		o.stores[node] = true
	}
	booked := st.reservedGPUs()
	now := map[string]string{}
	for _, cl := range clashes(booked, f) {
		now[cl.GPU] = cl.Pod
		if o.seen[cl.GPU] == cl.Pod {
			continue
		}
		o.clashes.WithLabelValues(cl.Node).Inc()
		b.log.Warn("GPU with faas-gpu replicas is held by another pod through the device plugin: replicas placed elsewhere",
			zap.String("gpu", cl.GPU), zap.String("node", cl.Node), zap.String("pod", cl.Pod))
	}
	o.seen = now
	deviceOf, mismatched := placeholderDevices(booked, inv, f)
	for _, u := range mismatched {
		key := "placeholder device " + u
		if !b.problems[key] {
			b.problems[key] = true
			b.log.Warn("GPU placeholder holds a device of another node or kind: replicas keep the GPU faas-gpu chose",
				zap.String("gpu", u), zap.String("device", f.held[reservationName(u)]))
		}
	}
	changed := !maps.Equal(st.deviceOf, deviceOf)
	st.deviceOf = deviceOf
	return changed
}
