package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// The pytorch-gpu template parked: a function made with faas-cli new and
// annotated com.openfaas.gpu.parked keeps one process started ahead,
// behind the provider's watchdog, with torch imported and no model; the
// scale-up's replica is that process, handed its settings, loads its model
// then and answers through the gateway. Real PyTorch on CPU.
func TestGPUTemplateParked(t *testing.T) {
	pyDir := torchPython(t)
	gatewayBin.get(t)
	dir := t.TempDir()
	faasCLINew(t, dir, "pytorch-gpu", "parkedfn")
	stackYML := `version: 1.0
provider:
  name: openfaas
  gateway: http://127.0.0.1:8080
functions:
  parkedfn:
    lang: pytorch-gpu
    handler: ./parkedfn
    image: ghcr.io/faas-gpu/parkedfn:latest
    environment:
      FAAS_GPU_CPU_THREADS: "1"
    annotations:
      com.openfaas.gpu.model: tiny
      com.openfaas.gpu.sm: "10"
      com.openfaas.gpu.memory: 64Mi
      com.openfaas.gpu.parked: "1"
`
	services := buildStack(t, dir, stackYML)
	c := newCreds(t)
	p := startProviderWith(t, c, t.TempDir(), 0, providerOpts{Dir: dir, Env: []string{"PATH=" + pyDir + string(os.PathListSeparator) + os.Getenv("PATH")}})
	startGateway(t, p)
	gw, _ := newSDKClient(t, gatewayURL, c)
	hc := newHTTPClient(70 * time.Second)
	t.Cleanup(hc.CloseIdleConnections)
	ctx := context.Background()
	if code, err := gw.Deploy(ctx, toDeployment("parkedfn", services.Functions["parkedfn"])); err != nil || code != http.StatusAccepted {
		t.Fatalf("deploy parkedfn: want 202, got %d, %v", code, err)
	}
	p.waitReady(t, defaultNS, "parkedfn", 1, 3*time.Minute)

	parkedID := p.waitParked(t, "parkedfn", 3*time.Minute)
	// The template's own line: it imported torch and waits, model unloaded.
	r := mustDo(t, p.HTTP, http.MethodGet, p.URL+"/system/logs?name=parkedfn&follow=false", nil, &p.Creds, nil)
	if !strings.Contains(string(r.Body), "parked: waiting for GPU settings") || !strings.Contains(string(r.Body), parkedID) {
		t.Errorf("the parked process %s did not log that it waits for its settings; logs:\n%s", parkedID, truncate(string(r.Body), 3000))
	}

	// faas-cli scale parkedfn --replicas 2
	if err := gw.ScaleFunction(ctx, "parkedfn", defaultNS, 2); err != nil {
		t.Fatalf("ScaleFunction parkedfn 2: %v", err)
	}
	p.waitReady(t, defaultNS, "parkedfn", 2, 3*time.Minute)
	took, _ := p.replicaOnParked(t, "parkedfn", parkedID)
	// Figures, not limits: a replica's placement to ready, as the provider
	// logged it (its start-up histogram's samples).
	for _, m := range p.logEntries("replica ready") {
		if m["function"] == "parkedfn" {
			how := "its own process"
			if m["replica"] == took {
				how = "parked process " + parkedID
			}
			startup, _ := m["startup"].(float64)
			t.Logf("replica %s (%s): ready %.3f s after its placement", m["replica"], how, startup)
		}
	}

	// It serves through the gateway: both replicas answer the model's
	// output, and the parked one says it is no longer parked.
	for i := 0; i < 4; i++ {
		r := mustDo(t, hc, http.MethodPost, gatewayURL+"/function/parkedfn", []byte("[1, 2, 3, 4]"), nil, nil)
		var out struct {
			Model  string    `json:"model"`
			Output []float64 `json:"output"`
		}
		if r.Code != http.StatusOK || json.Unmarshal(r.Body, &out) != nil || out.Model != "tiny" || len(out.Output) != 2 {
			t.Fatalf("POST /function/parkedfn: want 200 and tiny's two outputs, got %s", r)
		}
	}
}
