package local

import "time"

// SLO is the function's latency target (com.openfaas.gpu.slo), for the
// proxy to count the invocations that miss it (handlers.SLOSource). It is
// asked once per invocation: one lock, one map lookup, no allocation.
func (b *Backend) SLO(ns, name string) (time.Duration, bool) {
	// The map key built in a stack buffer: m[string(bytes)] does not
	// copy, where key(ns, name) would allocate for long names.
	var buf [128]byte
	k := append(append(append(buf[:0], ns...), '/'), name...)
	b.mu.Lock()
	defer b.mu.Unlock()
	slo, ok := b.slo[string(k)]
	return slo, ok && slo > 0
}
