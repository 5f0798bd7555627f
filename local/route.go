package local

import (
	"fmt"
	"io/fs"
	"time"

	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// route is what the proxy reads of a function: its replicas in service
// and what every request needs to know. It is immutable, rebuilt under
// the backend's lock whenever the function's replicas change, and read
// without it, so that an invocation never waits behind a report, a disk
// write or a decision.
type route struct {
	replicas []*replica
	// batches are the replicas' batch sizes as they were told
	// (lifecycle.ReplicaBatch), for the proxy's pull dispatch.
	batches []int
	slo     time.Duration
	model   string
}

// publishRouteLocked rebuilds function k's route from the core, or drops
// it when the function is gone.
func (b *Backend) publishRouteLocked(k string) {
	v, ok := b.core.Function(k)
	b.routesMu.Lock()
	defer b.routesMu.Unlock()
	if !ok {
		delete(b.routes, k)
		return
	}
	rt := &route{slo: v.Plan.Request.SLO, model: v.Plan.Request.Model}
	for _, rv := range v.Live {
		if r := b.running[rv.ID]; r != nil && r.run != nil {
			rt.replicas = append(rt.replicas, r)
			rt.batches = append(rt.batches, lifecycle.ReplicaBatch(v.Spec, r.config))
		}
	}
	b.routes[k] = rt
}

// routeOf is function ns/name's route; the key is built in a stack
// buffer, as a map lookup with string(bytes) does not allocate.
func (b *Backend) routeOf(ns, name string) (*route, bool) {
	var buf [128]byte
	k := append(append(append(buf[:0], ns...), '/'), name...)
	b.routesMu.RLock()
	rt, ok := b.routes[string(k)]
	b.routesMu.RUnlock()
	return rt, ok
}

// Route is the proxy's one lookup of a request (handlers.ReplicaResolver):
// the replicas in service that answer now, the function's SLO and model.
// The request's model does not matter here: emulated replicas count their
// own cache outcomes as they serve.
func (b *Backend) Route(ns, name, _ string) (scheduler.Route, error) {
	rt, ok := b.routeOf(ns, name)
	if !ok {
		return scheduler.Route{}, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	return scheduler.Route{Endpoints: b.endpoints(rt), SLO: rt.slo, Model: rt.model}, nil
}

// Replicas lists the replicas in service that answer requests now.
func (b *Backend) Replicas(ns, name string) ([]scheduler.Endpoint, error) {
	rt, ok := b.routeOf(ns, name)
	if !ok {
		return nil, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	return b.endpoints(rt), nil
}

func (b *Backend) endpoints(rt *route) []scheduler.Endpoint {
	eps := make([]scheduler.Endpoint, 0, len(rt.replicas))
	for i, r := range rt.replicas {
		if r.run.Ready() {
			eps = append(eps, scheduler.Endpoint{ID: r.id, URL: r.run.URL(), InFlight: &r.inFlight, Models: b.cache.ModelCount(r.id),
				Batch: rt.batches[i], Throughput: r.config.Throughput})
		}
	}
	return eps
}

// Holds reports whether a replica has model in its GPU memory.
func (b *Backend) Holds(replicaID, model string) bool { return b.cache.Holds(replicaID, model) }

// ReplicaModels takes what a replica says it holds
// (handlers.ModelReporter, docs/replica-protocol.md) into the model cache,
// for routing and placement. The proxy calls it per response: it takes
// the cache's own lock, never the backend's.
func (b *Backend) ReplicaModels(replicaID string, models []string) {
	b.cache.Report(replicaID, models, time.Now())
}

// ReplicaModelLoads keeps what a replica says its model loads took
// (handlers.ModelLoadReporter), for /system/gpus. Only the proxy's asks
// call it, beside the requests, so the backend's lock is fine here.
func (b *Backend) ReplicaModelLoads(replicaID string, seconds map[string]float64) {
	b.mu.Lock()
	r := b.running[replicaID]
	b.mu.Unlock()
	if r != nil {
		r.modelLoads.Store(&seconds)
	}
}
