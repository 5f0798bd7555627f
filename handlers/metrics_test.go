package handlers_test

import (
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsAfterAScenario(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm := handlers.NewProxyMetrics(reg)
	srv, b := newServerAndBackend(t, local.Config{Emulation: local.Emulation{Latency: time.Millisecond}}, handlers.ProxyOptions{Timeout: 5 * time.Second, Metrics: pm})
	reg.MustRegister(handlers.NewCollector(b))

	mustDo(t, srv, "POST", "/system/functions", `{"service":"a","image":"img","annotations":{"com.openfaas.gpu.sm":"30","com.openfaas.gpu.memory":"4Gi"}}`, 202)
	mustDo(t, srv, "POST", "/system/functions", `{"service":"b","image":"img","annotations":{"com.openfaas.gpu.sm":"50","com.openfaas.gpu.memory":"2Gi"}}`, 202)
	mustDo(t, srv, "POST", "/system/functions", `{"service":"c","image":"img","annotations":{"com.openfaas.gpu.sm":"90","com.openfaas.gpu.memory":"2Gi"}}`, 202)
	mustDo(t, srv, "POST", "/system/functions", `{"service":"d","image":"img","annotations":{"com.openfaas.gpu.sm":"90","com.openfaas.gpu.memory":"2Gi"}}`, 202) // no room: pending
	waitReady(t, srv, "a")
	for range 3 {
		invoke(t, srv, "/function/a", "")
	}
	mustDo(t, srv, "POST", "/system/scale-function/b", `{"replicas":0}`, 202) // b's replica stays warm

	// a (30%) and b (50%) share GPU 0 by best fit; c takes GPU 1; d waits.
	// b is warm now: its memory stays, its SM share goes.
	want := `
# HELP faas_gpu_gpu_sm_allocated_percent SM % of the GPU given to replicas (MPS active-thread percentages summed).
# TYPE faas_gpu_gpu_sm_allocated_percent gauge
faas_gpu_gpu_sm_allocated_percent{gpu="GPU-00000000-faa5-0000-0000-000000000000",node="node-a"} 30
faas_gpu_gpu_sm_allocated_percent{gpu="GPU-00000000-faa5-0000-0000-000000000001",node="node-a"} 90
# HELP faas_gpu_gpu_memory_allocated_bytes GPU memory given to replicas, warm ones included.
# TYPE faas_gpu_gpu_memory_allocated_bytes gauge
faas_gpu_gpu_memory_allocated_bytes{gpu="GPU-00000000-faa5-0000-0000-000000000000",node="node-a"} 6.442450944e+09
faas_gpu_gpu_memory_allocated_bytes{gpu="GPU-00000000-faa5-0000-0000-000000000001",node="node-a"} 2.147483648e+09
# HELP faas_gpu_pending_replicas Replicas that fit on no GPU yet.
# TYPE faas_gpu_pending_replicas gauge
faas_gpu_pending_replicas 1
# HELP faas_gpu_cache_hits_total Requests whose model was in the replica's GPU memory.
# TYPE faas_gpu_cache_hits_total counter
faas_gpu_cache_hits_total 2
# HELP faas_gpu_cache_misses_total Cold model loads.
# TYPE faas_gpu_cache_misses_total counter
faas_gpu_cache_misses_total 1
# HELP faas_gpu_invocations_total Invocations the proxy forwarded, by status code and model-cache outcome (hit, node-hit, miss, unknown).
# TYPE faas_gpu_invocations_total counter
faas_gpu_invocations_total{cache="hit",code="200",function="a",namespace="openfaas-fn"} 2
faas_gpu_invocations_total{cache="miss",code="200",function="a",namespace="openfaas-fn"} 1
`
	names := []string{"faas_gpu_gpu_sm_allocated_percent", "faas_gpu_gpu_memory_allocated_bytes", "faas_gpu_pending_replicas",
		"faas_gpu_cache_hits_total", "faas_gpu_cache_misses_total", "faas_gpu_invocations_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "faas_gpu_invocation_duration_seconds"); n != 1 {
		t.Fatalf("duration histogram series = %d, want 1", n)
	}
	desired := `
# HELP faas_gpu_function_replicas Replicas of the function by state: desired, ready, pending, idle (warm).
# TYPE faas_gpu_function_replicas gauge
faas_gpu_function_replicas{function="a",namespace="openfaas-fn",state="desired"} 1
faas_gpu_function_replicas{function="a",namespace="openfaas-fn",state="idle"} 0
faas_gpu_function_replicas{function="a",namespace="openfaas-fn",state="pending"} 0
faas_gpu_function_replicas{function="a",namespace="openfaas-fn",state="ready"} 1
faas_gpu_function_replicas{function="b",namespace="openfaas-fn",state="desired"} 0
faas_gpu_function_replicas{function="b",namespace="openfaas-fn",state="idle"} 1
faas_gpu_function_replicas{function="b",namespace="openfaas-fn",state="pending"} 0
faas_gpu_function_replicas{function="b",namespace="openfaas-fn",state="ready"} 0
faas_gpu_function_replicas{function="c",namespace="openfaas-fn",state="desired"} 1
faas_gpu_function_replicas{function="c",namespace="openfaas-fn",state="idle"} 0
faas_gpu_function_replicas{function="c",namespace="openfaas-fn",state="pending"} 0
faas_gpu_function_replicas{function="c",namespace="openfaas-fn",state="ready"} 1
faas_gpu_function_replicas{function="d",namespace="openfaas-fn",state="desired"} 1
faas_gpu_function_replicas{function="d",namespace="openfaas-fn",state="idle"} 0
faas_gpu_function_replicas{function="d",namespace="openfaas-fn",state="pending"} 1
faas_gpu_function_replicas{function="d",namespace="openfaas-fn",state="ready"} 0
`
	waitReady(t, srv, "c")
	if err := testutil.GatherAndCompare(reg, strings.NewReader(desired), "faas_gpu_function_replicas"); err != nil {
		t.Fatal(err)
	}
}
