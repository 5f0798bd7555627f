package handlers_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The local backend tells the proxy each function's SLO: with emulated
// replicas slower than it, every invocation is a violation, and
// /system/gpus says so; a function without an SLO has none.
func TestLocalBackendSLOs(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm := handlers.NewProxyMetrics(reg)
	srv, b := newServerAndBackend(t, local.Config{Emulation: local.Emulation{Latency: 30 * time.Millisecond}},
		handlers.ProxyOptions{Timeout: 5 * time.Second, Metrics: pm})
	mustDo(t, srv, "POST", "/system/functions", `{"service":"tight","image":"img","annotations":{"com.openfaas.gpu.sm":"10","com.openfaas.gpu.memory":"1Gi","com.openfaas.gpu.slo":"10ms"}}`, 202)
	mustDo(t, srv, "POST", "/system/functions", `{"service":"free","image":"img","annotations":{"com.openfaas.gpu.sm":"10","com.openfaas.gpu.memory":"1Gi"}}`, 202)
	waitReady(t, srv, "tight")
	waitReady(t, srv, "free")

	if rt, err := b.Route("openfaas-fn", "tight", ""); err != nil || rt.SLO != 10*time.Millisecond {
		t.Errorf("Route(tight).SLO = %v (%v), want 10ms", rt.SLO, err)
	}
	if rt, err := b.Route("openfaas-fn", "free", ""); err != nil || rt.SLO != 0 {
		t.Errorf("Route(free).SLO = %v (%v), want none", rt.SLO, err)
	}
	if _, err := b.Route("openfaas-fn", "nope", ""); err == nil {
		t.Error("Route(nope) found a function that does not exist")
	}
	// The one lookup per request allocates only the endpoint list it
	// returns.
	if n := testing.AllocsPerRun(100, func() { _, _ = b.Route("openfaas-fn", "tight", "") }); n > 1 {
		t.Errorf("Route allocates %.0f times per call, want at most 1", n)
	}

	for range 4 {
		invoke(t, srv, "/function/tight", "")
	}
	for range 3 {
		invoke(t, srv, "/function/free", "")
	}
	var rep scheduler.ClusterReport
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/gpus", "", 200)), &rep); err != nil {
		t.Fatal(err)
	}
	got := map[string]*scheduler.MeasuredLatency{}
	for _, f := range rep.Functions {
		got[f.Name] = f.Measured
	}
	if m := got["tight"]; m == nil || m.Requests != 4 || m.SLOViolations == nil || *m.SLOViolations != 4 || *m.SLOViolationRatio != 1 || m.SLOMs != 10 || m.P50Ms < 30 {
		t.Errorf("tight: measured %+v, want 4 requests of 30 ms or more, all over the 10 ms SLO", m)
	}
	if m := got["free"]; m == nil || m.Requests != 3 || m.SLOViolations != nil || m.SLOViolationRatio != nil {
		t.Errorf("free: measured %+v, want 3 requests and no SLO fields", m)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP faas_gpu_function_slo_violations_total Invocations of a function with an SLO that took longer than it (as faas_gpu_invocation_duration_seconds measures), failed with a 5xx or a proxy error, or were refused with a full queue (429).
# TYPE faas_gpu_function_slo_violations_total counter
faas_gpu_function_slo_violations_total{function="tight",namespace="openfaas-fn"} 4
`), "faas_gpu_function_slo_violations_total"); err != nil {
		t.Error(err)
	}
}
