package handlers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsAfterAScenario(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm := handlers.NewProxyMetrics(reg)
	srv, b := newServerAndBackend(t, local.Config{Emulation: local.Emulation{Latency: time.Millisecond}}, handlers.ProxyOptions{Timeout: 5 * time.Second, Metrics: pm})
	reg.MustRegister(handlers.NewCollector(b))

	mustDo(t, srv, "POST", "/system/functions", `{"service":"a","image":"img","annotations":{"com.openfaas.gpu.sm":"30","com.openfaas.gpu.memory":"4Gi","com.openfaas.gpu.slo":"60ms"}}`, 202)
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
# HELP faas_gpu_pending_replicas Replicas that fit on no GPU yet, by cause: sm, memory, sm_or_memory (some GPUs lack SM %, the others memory), whole_gpus, no_gpu, port (booked, waiting for a fixed upstream port another replica holds), unknown (not tried yet).
# TYPE faas_gpu_pending_replicas gauge
faas_gpu_pending_replicas{reason="memory"} 0
faas_gpu_pending_replicas{reason="no_gpu"} 0
faas_gpu_pending_replicas{reason="port"} 0
faas_gpu_pending_replicas{reason="sm"} 1
faas_gpu_pending_replicas{reason="sm_or_memory"} 0
faas_gpu_pending_replicas{reason="unknown"} 0
faas_gpu_pending_replicas{reason="whole_gpus"} 0
# HELP faas_gpu_cache_hits_total Requests whose model was in the replica's GPU memory.
# TYPE faas_gpu_cache_hits_total counter
faas_gpu_cache_hits_total 3
# HELP faas_gpu_cache_misses_total Cold model loads.
# TYPE faas_gpu_cache_misses_total counter
faas_gpu_cache_misses_total 3
# HELP faas_gpu_invocations_total Invocations the proxy forwarded, those that timed out in its queue (504) and those refused with the queue full (429), by status code and model-cache outcome (hit, node-hit, miss, unknown).
# TYPE faas_gpu_invocations_total counter
faas_gpu_invocations_total{cache="hit",code="200",function="a",namespace="openfaas-fn"} 3
# HELP faas_gpu_function_slo_seconds The function's latency SLO (com.openfaas.gpu.slo); absent without one.
# TYPE faas_gpu_function_slo_seconds gauge
faas_gpu_function_slo_seconds{function="a",namespace="openfaas-fn"} 0.06
# HELP faas_gpu_scheduler_decisions_total Placement attempts by result: placed, placed_with_eviction (warm replicas evicted to fit, counted in cache_evictions_total), pending (fits on no GPU; tried again whenever capacity may have freed).
# TYPE faas_gpu_scheduler_decisions_total counter
faas_gpu_scheduler_decisions_total{result="pending"} 2
faas_gpu_scheduler_decisions_total{result="placed"} 3
faas_gpu_scheduler_decisions_total{result="placed_with_eviction"} 0
`
	// d is tried when deployed and again when b's scale-down frees SM %
	// (not enough). a, b and c each loaded their model before they were
	// ready (misses of the emulated default load time, 0), so a's three
	// calls hit.
	names := []string{"faas_gpu_gpu_sm_allocated_percent", "faas_gpu_gpu_memory_allocated_bytes", "faas_gpu_pending_replicas",
		"faas_gpu_cache_hits_total", "faas_gpu_cache_misses_total", "faas_gpu_invocations_total",
		"faas_gpu_function_slo_seconds", "faas_gpu_scheduler_decisions_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "faas_gpu_invocation_duration_seconds"); n != 1 {
		t.Fatalf("duration histogram series = %d, want 1", n)
	}
	// Histograms by their sample counts: the times themselves vary.
	for _, h := range []struct {
		name   string
		labels map[string]string
		count  uint64
	}{
		{"faas_gpu_scheduler_decision_duration_seconds", nil, 5},
		{"faas_gpu_replica_startup_seconds", nil, 3},                                     // a, b, c: emulated, ready when started
		{"faas_gpu_model_load_duration_seconds", map[string]string{"source": "cold"}, 3}, // a, b, c: each loaded its model to start
	} {
		if got := histogramCount(t, reg, h.name, h.labels); got != h.count {
			t.Errorf("%s%v count = %d, want %d", h.name, h.labels, got, h.count)
		}
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

// TestDeletedFunctionHasNoSeries: after a function is deleted no series
// is labelled with it, from the proxy or from the collector; deployed again
// under the same name it starts from zero.
func TestDeletedFunctionHasNoSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm := handlers.NewProxyMetrics(reg)
	srv, b := newServerAndBackend(t, local.Config{Emulation: local.Emulation{Latency: time.Millisecond}}, handlers.ProxyOptions{Timeout: 5 * time.Second, Metrics: pm})
	reg.MustRegister(handlers.NewCollector(b))

	deploy := `{"service":"a","image":"img","annotations":{"com.openfaas.gpu.sm":"30","com.openfaas.gpu.memory":"4Gi","com.openfaas.gpu.slo":"60ms"}}`
	mustDo(t, srv, "POST", "/system/functions", deploy, 202)
	mustDo(t, srv, "POST", "/system/functions", `{"service":"keep","image":"img","annotations":{"com.openfaas.gpu.sm":"20","com.openfaas.gpu.memory":"2Gi","com.openfaas.gpu.slo":"60ms"}}`, 202)
	waitReady(t, srv, "a")
	waitReady(t, srv, "keep")
	for range 3 {
		invoke(t, srv, "/function/a", "")
	}
	invoke(t, srv, "/function/keep", "")
	// Each family the proxy labels by function has a series for a now, so
	// the check below sees them go rather than never come.
	for _, name := range []string{"faas_gpu_invocations_total", "faas_gpu_invocation_duration_seconds", "faas_gpu_function_slo_violations_total", "faas_gpu_function_replicas"} {
		if got := seriesOf(t, reg, "a")[name]; got == 0 {
			t.Fatalf("before the delete: no %s series for a", name)
		}
	}

	mustDo(t, srv, "DELETE", "/system/functions", `{"functionName":"a"}`, 202)
	if left := seriesOf(t, reg, "a"); len(left) != 0 {
		t.Errorf("after the delete, series labelled function=a: %v", left)
	}
	if kept := seriesOf(t, reg, "keep")["faas_gpu_invocations_total"]; kept != 1 {
		t.Errorf("the other function's invocation series: %d, want 1", kept)
	}

	mustDo(t, srv, "POST", "/system/functions", deploy, 202)
	waitReady(t, srv, "a")
	invoke(t, srv, "/function/a", "")
	if got := invocationsOf(t, reg, "a"); got != 1 {
		t.Errorf("redeployed a: %v invocations counted, want 1 (the new one only)", got)
	}
}

// seriesOf counts, per metric family, the series labelled function=name.
func seriesOf(t *testing.T, g prometheus.Gatherer, name string) map[string]int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "function" && lp.GetValue() == name {
					out[mf.GetName()]++
				}
			}
		}
	}
	return out
}

// invocationsOf sums faas_gpu_invocations_total over the series of
// function name.
func invocationsOf(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "faas_gpu_invocations_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "function" && lp.GetValue() == name {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// histogramCount is the sample count of the series of histogram name with
// labels.
func histogramCount(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			if len(have) != len(labels) {
				continue
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			return m.GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("no %s%v series", name, labels)
	return 0
}

// TestAutoscalerActionsMetric: the autoscaler's applied decisions per
// function, scale to zero counting as down; a function it does not
// manage has no series.
func TestAutoscalerActionsMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	srv, b := newServerAndBackend(t, local.Config{Emulation: local.Emulation{Latency: time.Millisecond}}, handlers.ProxyOptions{Timeout: 5 * time.Second})
	reg.MustRegister(handlers.NewCollector(b))
	mustDo(t, srv, "POST", "/system/functions", `{"service":"z","image":"img","labels":{"com.openfaas.scale.zero":"true","com.openfaas.scale.zero-duration":"30s"},"annotations":{"com.openfaas.gpu.sm":"30","com.openfaas.gpu.memory":"2Gi"}}`, 202)
	mustDo(t, srv, "POST", "/system/functions", `{"service":"fixed","image":"img","annotations":{"com.openfaas.gpu.sm":"30","com.openfaas.gpu.memory":"2Gi"}}`, 202)
	b.Tick(time.Now().Add(time.Minute))
	want := `
# HELP faas_gpu_autoscaler_actions_total Autoscaler decisions applied, by direction: up adds replicas, down removes some (to zero included).
# TYPE faas_gpu_autoscaler_actions_total counter
faas_gpu_autoscaler_actions_total{direction="down",function="z",namespace="openfaas-fn"} 1
faas_gpu_autoscaler_actions_total{direction="up",function="z",namespace="openfaas-fn"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "faas_gpu_autoscaler_actions_total"); err != nil {
		t.Fatal(err)
	}
}

type fixedReport scheduler.ClusterReport

func (r fixedReport) GPUReport(context.Context) (scheduler.ClusterReport, error) {
	return scheduler.ClusterReport(r), nil
}

// TestCollectorEdgeCases: what the scenarios above do not reach.
func TestCollectorEdgeCases(t *testing.T) {
	rep := fixedReport{
		// A standby's view: pending replicas it never tried to place.
		Pending: []scheduler.PendingEntry{{ID: "x-1"}, {ID: "y-1", ReasonCode: scheduler.NoFitWholeGPUs}},
		Functions: []scheduler.FunctionReport{
			{Name: "none", Namespace: "ns"},
			{Name: "odd", Namespace: "ns", SLO: "soon"},
			{Name: "slow", Namespace: "ns", SLO: "1.5s"},
		},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(handlers.NewCollector(rep))
	want := `
# HELP faas_gpu_pending_replicas Replicas that fit on no GPU yet, by cause: sm, memory, sm_or_memory (some GPUs lack SM %, the others memory), whole_gpus, no_gpu, port (booked, waiting for a fixed upstream port another replica holds), unknown (not tried yet).
# TYPE faas_gpu_pending_replicas gauge
faas_gpu_pending_replicas{reason="memory"} 0
faas_gpu_pending_replicas{reason="no_gpu"} 0
faas_gpu_pending_replicas{reason="port"} 0
faas_gpu_pending_replicas{reason="sm"} 0
faas_gpu_pending_replicas{reason="sm_or_memory"} 0
faas_gpu_pending_replicas{reason="unknown"} 1
faas_gpu_pending_replicas{reason="whole_gpus"} 1
# HELP faas_gpu_function_slo_seconds The function's latency SLO (com.openfaas.gpu.slo); absent without one.
# TYPE faas_gpu_function_slo_seconds gauge
faas_gpu_function_slo_seconds{function="slow",namespace="ns"} 1.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "faas_gpu_pending_replicas", "faas_gpu_function_slo_seconds"); err != nil {
		t.Fatal(err)
	}
	// No model load of known duration: no series, rather than an empty
	// histogram that reads as "none happened".
	if n := testutil.CollectAndCount(handlers.NewCollector(rep), "faas_gpu_model_load_duration_seconds"); n != 0 {
		t.Fatalf("model load series = %d, want none", n)
	}
}

// A GPU's replicas by state: a standby is counted apart from warm replicas
// scaled down.
func TestGPUReplicasByState(t *testing.T) {
	rep := fixedReport{Nodes: []scheduler.NodeReport{{Name: "n", GPUs: []scheduler.GPUReport{{UUID: "g", Replicas: []scheduler.ReplicaReport{
		{ID: "a-1", Ready: true}, {ID: "a-2"}, {ID: "a-3", Idle: true, Standby: true}, {ID: "b-1", Idle: true},
	}}}}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(handlers.NewCollector(rep))
	want := `
# HELP faas_gpu_gpu_replicas Replicas on the GPU by state: active (in service or starting), idle (warm, scaled down), standby (warm, started for the next rise).
# TYPE faas_gpu_gpu_replicas gauge
faas_gpu_gpu_replicas{gpu="g",node="n",state="active"} 2
faas_gpu_gpu_replicas{gpu="g",node="n",state="idle"} 1
faas_gpu_gpu_replicas{gpu="g",node="n",state="standby"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "faas_gpu_gpu_replicas"); err != nil {
		t.Fatal(err)
	}
}

// Loads in idle time are counted by outcome, and none asked is no series.
func TestIdleModelLoadsExported(t *testing.T) {
	rep := fixedReport{Stats: scheduler.Stats{IdleLoads: map[string]uint64{scheduler.IdleLoadDone: 3, scheduler.IdleLoadNoRoom: 1}}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(handlers.NewCollector(rep))
	want := `
# HELP faas_gpu_idle_model_loads_total Models the provider asked replicas to load in their idle time (POST /_/models), by outcome: loaded, no_room (it would have had to evict), not_spoken (the replica does not take loads; it is asked no more), failed.
# TYPE faas_gpu_idle_model_loads_total counter
faas_gpu_idle_model_loads_total{outcome="loaded"} 3
faas_gpu_idle_model_loads_total{outcome="no_room"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "faas_gpu_idle_model_loads_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(handlers.NewCollector(fixedReport{}), "faas_gpu_idle_model_loads_total"); n != 0 {
		t.Fatalf("idle load series with none asked = %d, want none", n)
	}
}
