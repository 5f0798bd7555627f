package k8s

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// TestMetricsAndGPUMapOnKubernetes: the operator's tools work on the
// Kubernetes backend as in local mode: /metrics carries the allocator's
// numbers for the placed replicas, the leader's decisions, why a replica
// waits and how long the pods took to start, and /ui/ serves the GPU map.
func TestMetricsAndGPUMapOnKubernetes(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "operate")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	p.deploy(t, fn("scraped", 30, "2Gi"))
	p.ready(t, "scraped", 1, 30*time.Second)
	rep := p.gpus(t)
	var node, uuid string
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if r.Function == "scraped" {
					node, uuid = n.Name, g.UUID
					if !r.Ready || r.ReadyAfterSeconds == nil || *r.ReadyAfterSeconds < 0 {
						t.Errorf("replica %s: ready %v, readyAfterSeconds %v; want ready with its pod's start-up", r.ID, r.Ready, r.ReadyAfterSeconds)
					}
				}
			}
		}
	}
	if uuid == "" {
		t.Fatalf("scraped is on no GPU: %+v", rep)
	}
	// Best fit put scraped on gpu-a's first GPU, so no node has four empty
	// GPUs left: four whole GPUs wait.
	if node != "gpu-a" {
		t.Fatalf("scraped is on %s, want gpu-a (best fit, then node name)", node)
	}
	p.deploy(t, types.FunctionDeployment{Service: "waiting", Image: "ghcr.io/example/waiting:1", Limits: &types.FunctionResources{NvidiaGPU: "4"}})
	var metrics string
	want := []string{
		fmt.Sprintf(`faas_gpu_gpu_sm_allocated_percent{gpu=%q,node=%q} 30`, uuid, node),
		fmt.Sprintf(`faas_gpu_gpu_memory_allocated_bytes{gpu=%q,node=%q} 2.147483648e+09`, uuid, node),
		`faas_gpu_function_replicas{function="scraped",namespace="openfaas-fn",state="ready"} 1`,
		`faas_gpu_function_replicas{function="scraped",namespace="openfaas-fn",state="desired"} 1`,
		// One placement; the ready replica's start-up, counted once.
		`faas_gpu_scheduler_decisions_total{result="placed"} 1`,
		`faas_gpu_replica_startup_seconds_count 1`,
		`faas_gpu_pending_replicas{reason="whole_gpus"} 1`,
		`faas_gpu_pending_replicas{reason="sm"} 0`,
	}
	if err := poll(15*time.Second, func() bool {
		code, b := p.call(t, http.MethodGet, "/metrics", nil)
		metrics = string(b)
		if code != http.StatusOK {
			return false
		}
		for _, w := range want {
			if !strings.Contains(metrics, w+"\n") {
				return false
			}
		}
		return true
	}); err != nil {
		t.Log(metrics)
		for _, w := range want {
			if !strings.Contains(metrics, w+"\n") {
				t.Errorf("/metrics lacks %s", w)
			}
		}
		t.FailNow()
	}
	// waiting is tried again on each pass of the control loop: each try
	// counts, each is timed.
	m := regexp.MustCompile(`(?m)^faas_gpu_scheduler_decisions_total\{result="pending"\} (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatal("/metrics lacks faas_gpu_scheduler_decisions_total{result=\"pending\"}")
	}
	if n, err := strconv.ParseFloat(m[1], 64); err != nil || n < 1 {
		t.Errorf("pending placement attempts = %s, want at least 1", m[1])
	}
	if !strings.Contains(metrics, "faas_gpu_scheduler_decision_duration_seconds_count ") {
		t.Error("/metrics lacks faas_gpu_scheduler_decision_duration_seconds")
	}
	for _, pe := range p.gpus(t).Pending {
		if pe.Function == "waiting" && pe.ReasonCode != "whole_gpus" {
			t.Errorf("waiting is pending with reasonCode %q, want whole_gpus (%s)", pe.ReasonCode, pe.Reason)
		}
	}
	code, page := p.call(t, http.MethodGet, "/ui/", nil)
	if code != http.StatusOK || !strings.Contains(string(page), "GPU map") {
		t.Fatalf("GET /ui/ = %d, want the GPU map page", code)
	}
}
