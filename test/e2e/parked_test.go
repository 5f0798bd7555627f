package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// A function annotated com.openfaas.gpu.parked, deployed and scaled
// through the real gateway as faas-cli does: the provider keeps one of
// its processes started ahead, without GPU settings; the scale-up's
// replica is that process (no second start), handed its settings, and the
// function answers through the gateway with its MPS share; the pool is
// refilled; and a bad count is a 400 that names the annotation.
func TestGatewayParkedProcess(t *testing.T) {
	httpfn := httpfnBin.get(t)
	gatewayBin.get(t)
	c := newCreds(t)
	p := startProvider(t, c, t.TempDir(), 0)
	startGateway(t, p)
	gw, _ := newSDKClient(t, gatewayURL, c)
	hc := newHTTPClient(30 * time.Second)
	t.Cleanup(hc.CloseIdleConnections)
	ctx := context.Background()

	dep := func(name, parked string) types.FunctionDeployment {
		return types.FunctionDeployment{Service: name, Image: "example.com/" + name + ":1", EnvProcess: httpfn,
			EnvVars:     map[string]string{"mode": "http"},
			Annotations: &map[string]string{"com.openfaas.gpu.parked": parked, "com.openfaas.gpu.sm": "30", "com.openfaas.gpu.memory": "2Gi"}}
	}
	code, err := gw.Deploy(ctx, dep("bad-parked", "-1"))
	if code != http.StatusBadRequest || err == nil || !strings.Contains(err.Error(), "com.openfaas.gpu.parked") {
		t.Fatalf("deploy with com.openfaas.gpu.parked -1: want 400 naming the annotation, got %d, %v", code, err)
	}
	if code, err := gw.Deploy(ctx, dep("parky", "1")); err != nil || code != http.StatusAccepted {
		t.Fatalf("deploy parky: want 202, got %d, %v", code, err)
	}
	p.waitReady(t, defaultNS, "parky", 1, 30*time.Second)

	parkedCount := func() int {
		r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/gpus", nil, &p.Creds, nil)
		var rep struct {
			Functions []struct {
				Name   string `json:"name"`
				Parked int    `json:"parked"`
			} `json:"functions"`
		}
		if err := json.Unmarshal(r.Body, &rep); err != nil {
			t.Fatalf("GET /system/gpus: %v", err)
		}
		for _, f := range rep.Functions {
			if f.Name == "parky" {
				return f.Parked
			}
		}
		return -1
	}
	eventually(t, 30*time.Second, "a process of parky parked and waiting", func() (bool, string) {
		n := parkedCount()
		return n == 1, "parked: " + strconv.Itoa(n)
	})
	var parkedID string
	for _, m := range p.logEntries("process parked") {
		if m["function"] == "parky" {
			parkedID, _ = m["process"].(string)
		}
	}
	if parkedID == "" {
		t.Fatal(`no "process parked" log line for parky`)
	}

	// faas-cli scale parky --replicas 2
	if err := gw.ScaleFunction(ctx, "parky", defaultNS, 2); err != nil {
		t.Fatalf("ScaleFunction parky 2: %v", err)
	}
	p.waitReady(t, defaultNS, "parky", 2, 30*time.Second)
	var took, tookURL string
	for _, m := range p.logEntries("replica placed") {
		if m["function"] == "parky" && m["parkedProcess"] == parkedID {
			took, _ = m["replica"].(string)
			tookURL, _ = m["url"].(string)
		}
	}
	if took == "" {
		t.Fatalf("the scale-up's replica did not take parked process %s", parkedID)
	}
	starts := 0
	for _, r := range p.processReplicas("parky") {
		if r.ID == took {
			t.Fatalf("replica %s started a process of its own", took)
		}
		starts++
	}
	// The first replica, the parked process and its successor.
	eventually(t, 30*time.Second, "the pool refilled", func() (bool, string) {
		n := parkedCount()
		return n == 1, "parked: " + strconv.Itoa(n)
	})

	// It answers as a replica with its settings, and the function
	// answers through the gateway.
	for path, want := range map[string]string{"/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30", "/env/FAAS_GPU_PARKED": ""} {
		r := mustDo(t, hc, http.MethodGet, tookURL+path, nil, nil, nil)
		if r.Code != http.StatusOK || string(r.Body) != want {
			t.Errorf("replica %s (the parked process) GET %s: %d %q, want 200 %q", took, path, r.Code, r.Body, want)
		}
	}
	r := mustDo(t, hc, http.MethodGet, gatewayURL+"/function/parky/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", nil, nil, nil)
	if r.Code != http.StatusOK || string(r.Body) != "30" {
		t.Errorf("GET /function/parky/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE through the gateway: %d %q, want 200 \"30\"", r.Code, r.Body)
	}
	if starts > 3 {
		t.Errorf("%d process starts for parky, want 3 (its first replica, the parked process, its successor)", starts)
	}
}
