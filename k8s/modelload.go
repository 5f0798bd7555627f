package k8s

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
