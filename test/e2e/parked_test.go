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
// refilled; a bad count is a 400 that names the annotation, and "auto" is
// a count of its own.
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

	parkedID := p.waitParked(t, "parky", 30*time.Second)

	// faas-cli scale parky --replicas 2
	if err := gw.ScaleFunction(ctx, "parky", defaultNS, 2); err != nil {
		t.Fatalf("ScaleFunction parky 2: %v", err)
	}
	p.waitReady(t, defaultNS, "parky", 2, 30*time.Second)
	took, tookURL := p.replicaOnParked(t, "parky", parkedID)
	starts := 0
	for _, r := range p.processReplicas("parky") {
		if r.ID == took {
			t.Fatalf("replica %s started a process of its own", took)
		}
		starts++
	}
	// The first replica, the parked process and its successor.
	p.waitParked(t, "parky", 30*time.Second)

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

	// "auto" is taken as a count learnt from the function's starts: one
	// parked before any.
	if code, err := gw.Deploy(ctx, dep("parky-auto", "auto")); err != nil || code != http.StatusAccepted {
		t.Fatalf("deploy parky-auto with com.openfaas.gpu.parked auto: want 202, got %d, %v", code, err)
	}
	p.waitReady(t, defaultNS, "parky-auto", 1, 30*time.Second)
	p.waitParked(t, "parky-auto", 30*time.Second)
	if _, target := p.parkedReport(t, "parky-auto"); target != 1 {
		t.Errorf("/system/gpus parkedTarget of parky-auto = %d, want 1 (one start so far)", target)
	}
	if _, target := p.parkedReport(t, "parky"); target != 1 {
		t.Errorf("/system/gpus parkedTarget of parky = %d, want the 1 it asks", target)
	}
}

// parked is how many processes /system/gpus says function fn has parked;
// -1 when it lists no such function.
func (p *provider) parked(t *testing.T, fn string) int {
	t.Helper()
	n, _ := p.parkedReport(t, fn)
	return n
}

// parkedReport is what /system/gpus says of fn's parked processes: how
// many wait, and how many it keeps; -1, -1 when it does not list fn.
func (p *provider) parkedReport(t *testing.T, fn string) (parked, target int) {
	t.Helper()
	r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/gpus", nil, &p.Creds, nil)
	var rep struct {
		Functions []struct {
			Name         string `json:"name"`
			Parked       int    `json:"parked"`
			ParkedTarget int    `json:"parkedTarget"`
		} `json:"functions"`
	}
	if err := json.Unmarshal(r.Body, &rep); err != nil {
		t.Fatalf("GET /system/gpus: %v", err)
	}
	for _, f := range rep.Functions {
		if f.Name == fn {
			return f.Parked, f.ParkedTarget
		}
	}
	return -1, -1
}

// waitParked waits until function fn has one process parked and waiting,
// and returns the ID of the last one the provider logged parking.
func (p *provider) waitParked(t *testing.T, fn string, timeout time.Duration) string {
	t.Helper()
	eventually(t, timeout, "a process of "+fn+" parked and waiting", func() (bool, string) {
		n := p.parked(t, fn)
		return n == 1, "parked: " + strconv.Itoa(n)
	})
	var id string
	for _, m := range p.logEntries("process parked") {
		if m["function"] == fn {
			id, _ = m["process"].(string)
		}
	}
	if id == "" {
		t.Fatalf(`no "process parked" log line for %s`, fn)
	}
	return id
}

// replicaOnParked is the replica of fn that took parked process id, and
// its URL, as the provider logged its placement.
func (p *provider) replicaOnParked(t *testing.T, fn, id string) (replica, url string) {
	t.Helper()
	for _, m := range p.logEntries("replica placed") {
		if m["function"] == fn && m["parkedProcess"] == id {
			replica, _ = m["replica"].(string)
			url, _ = m["url"].(string)
		}
	}
	if replica == "" {
		t.Fatalf("no replica of %s took parked process %s", fn, id)
	}
	return replica, url
}
