package k8s

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMetricsAndGPUMapOnKubernetes: the operator's tools work on the
// Kubernetes backend as in local mode: /metrics carries the allocator's
// numbers for the placed replicas and /ui/ serves the GPU map.
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
				}
			}
		}
	}
	if uuid == "" {
		t.Fatalf("scraped is on no GPU: %+v", rep)
	}
	var metrics string
	want := []string{
		fmt.Sprintf(`faas_gpu_gpu_sm_allocated_percent{gpu=%q,node=%q} 30`, uuid, node),
		fmt.Sprintf(`faas_gpu_gpu_memory_allocated_bytes{gpu=%q,node=%q} 2.147483648e+09`, uuid, node),
		`faas_gpu_function_replicas{function="scraped",namespace="openfaas-fn",state="ready"} 1`,
		`faas_gpu_function_replicas{function="scraped",namespace="openfaas-fn",state="desired"} 1`,
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
		for _, w := range want {
			if !strings.Contains(metrics, w+"\n") {
				t.Errorf("/metrics lacks %s", w)
			}
		}
		t.FailNow()
	}
	code, page := p.call(t, http.MethodGet, "/ui/", nil)
	if code != http.StatusOK || !strings.Contains(string(page), "GPU map") {
		t.Fatalf("GET /ui/ = %d, want the GPU map page", code)
	}
}
