package k8s

import "time"

// SLO is the function's latency target (com.openfaas.gpu.slo), for the
// proxy to count the invocations that miss it (handlers.SLOSource). It is
// asked once per invocation, from the same request ReadyEndpoints reads.
func (b *Backend) SLO(ns, name string) (time.Duration, bool) {
	req, err := b.functionRequest(ns, name)
	if err != nil || req.SLO <= 0 {
		return 0, false
	}
	return req.SLO, true
}
