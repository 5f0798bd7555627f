package k8s

import (
	"encoding/json"
	"time"
)

// SLO is the function's latency target (com.openfaas.gpu.slo), for the
// proxy to count the invocations that miss it (handlers.SLOSource). It is
// asked once per invocation. The leader answers from its decisions under
// one lock with a map lookup; a standby has no decisions, and reads the
// function's record from the informer, as functionModel does for the same
// request.
func (b *Backend) SLO(ns, name string) (time.Duration, bool) {
	// The map key built in a stack buffer, as fnKey lays it out:
	// m[string(bytes)] does not copy, where fnKey would allocate for long
	// names.
	var buf [128]byte
	k := append(append(append(buf[:0], ns...), '/'), name...)
	b.mu.Lock()
	if b.st != nil {
		fn, ok := b.st.functions[string(k)]
		b.mu.Unlock()
		if !ok || fn.plan.Request.SLO <= 0 {
			return 0, false
		}
		return fn.plan.Request.SLO, true
	}
	b.mu.Unlock()
	svc, err := b.svcs.in(ns).Services(ns).Get(name)
	if err != nil {
		return 0, false
	}
	// Only the SLO of the record (scheduler.Function's gpu.slo).
	var rec struct {
		GPU struct {
			SLO time.Duration `json:"slo"`
		} `json:"gpu"`
	}
	if err := json.Unmarshal([]byte(svc.Annotations[AnnotationFunction]), &rec); err != nil || rec.GPU.SLO <= 0 {
		return 0, false
	}
	return rec.GPU.SLO, true
}
