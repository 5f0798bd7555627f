package k8s

import (
	"github.com/faas-gpu/faas-gpu/gpu"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// The proxy asks for a function's GPU request (its SLO and model) on every
// request. The function's record, its Service, is decoded once each time
// the informer sees it change and kept here; the request path reads it
// without taking the backend's lock, so an invocation never waits behind
// a reconcile or a report, on the leader or a standby.

// recordSeen decodes a function record the informer delivered.
func (b *Backend) recordSeen(obj any) {
	svc, ok := obj.(*corev1.Service)
	if !ok || svc.Labels[LabelFunction] == "" {
		return
	}
	spec, _, err := decodeRecord(svc)
	if err != nil {
		b.requests.Delete(fnKey(svc.Namespace, svc.Name))
		return
	}
	b.requests.Store(fnKey(svc.Namespace, svc.Name), spec.GPU)
}

// recordGone forgets a deleted function's record.
func (b *Backend) recordGone(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if svc, ok := obj.(*corev1.Service); ok {
		b.requests.Delete(fnKey(svc.Namespace, svc.Name))
	}
}

// functionRequest is the function's GPU request: from its decoded record,
// with no lock; on the leader, for a function whose record the informer
// does not show yet (just deployed), from the leader's own state.
func (b *Backend) functionRequest(ns, name string) (gpu.Request, error) {
	k := fnKey(ns, name)
	if v, found := b.requests.Load(k); found {
		return v.(gpu.Request), nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.st != nil {
		if req, ok := b.st.requests[k]; ok {
			return req, nil
		}
	}
	return gpu.Request{}, notFound(ns, name)
}
