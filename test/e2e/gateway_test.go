package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
	"github.com/openfaas/go-sdk/stack"
)

// The gateway's ports are hard-coded.
const (
	gatewayPort        = 8080
	gatewayMetricsPort = 8082
	gatewayURL         = "http://127.0.0.1:8080"
)

// startGateway runs the real gateway in front of the provider. Its
// Prometheus is the provider itself, which answers the gateway's one query
// (invocation counts) from its proxy: without an answer the gateway's
// function list panics as soon as a function exists.
func startGateway(t *testing.T, p *provider) *proc {
	t.Helper()
	bin := gatewayBin.get(t)
	for _, port := range []int{gatewayPort, gatewayMetricsPort} {
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("the OpenFaaS gateway needs port %d, which is taken (%v): stop whatever listens there "+
				"(another gateway test or `make run` beside a gateway?) and run the test again", port, err)
		}
		ln.Close()
	}
	provURL, err := url.Parse(p.URL)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = gatewayDir // ./assets holds the UI
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"functions_provider_url=" + p.URL + "/",
		"basic_auth=true",
		"secret_mount_path=" + p.Creds.Dir,
		"function_namespace=" + defaultNS,
		"scale_from_zero=true",
		"faas_prometheus_host=" + provURL.Hostname(),
		"faas_prometheus_port=" + provURL.Port(),
		"read_timeout=65s",
		"write_timeout=65s",
		"upstream_timeout=60s",
	}
	g := startProc(t, "the OpenFaaS gateway", cmd)
	waitHealthy(t, g, gatewayURL+"/healthz", 30*time.Second)
	return g
}

const stackYAML = `version: 1.0
provider:
  name: openfaas
  gateway: http://127.0.0.1:8080
functions:
  classic:
    lang: dockerfile
    image: ghcr.io/faas-gpu/classic-cat:latest
    fprocess: cat
    labels:
      team: vision
    annotations:
      com.openfaas.gpu.sm: "25"
      com.openfaas.gpu.memory: 2Gi
      com.openfaas.gpu.model: resnet50
  httpfn:
    lang: dockerfile
    image: ghcr.io/faas-gpu/httpfn:latest
    fprocess: ${HTTPFN_BIN}
    environment:
      mode: http
      write_debug: "true"
    annotations:
      com.openfaas.gpu.sm: "50"
      com.openfaas.gpu.memory: 4Gi
    secrets:
      - api-key
  emulated:
    image: ghcr.io/faas-gpu/resnet50:latest
    annotations:
      com.openfaas.gpu.model: resnet50
`

// toDeployment converts a stack.yml function as faas-cli deploy does.
func toDeployment(name string, f stack.Function) types.FunctionDeployment {
	dep := types.FunctionDeployment{
		Service:     name,
		Image:       f.Image,
		EnvProcess:  f.FProcess,
		EnvVars:     f.Environment,
		Labels:      f.Labels,
		Annotations: f.Annotations,
		Secrets:     f.Secrets,
		Namespace:   f.Namespace,
	}
	if f.Constraints != nil {
		dep.Constraints = *f.Constraints
	}
	if f.Limits != nil {
		dep.Limits = &types.FunctionResources{Memory: f.Limits.Memory, CPU: f.Limits.CPU}
	}
	if f.Requests != nil {
		dep.Requests = &types.FunctionResources{Memory: f.Requests.Memory, CPU: f.Requests.CPU}
	}
	return dep
}

// TestGateway is issue 2's end-to-end test: the real OpenFaaS gateway in
// front of faas-gpu, driven as faas-cli drives it.
func TestGateway(t *testing.T) {
	httpfn := httpfnBin.get(t)
	gatewayBin.get(t)
	c := newCreds(t)
	p := startProvider(t, c, t.TempDir(), 0)
	startGateway(t, p)
	gw, rec := newSDKClient(t, gatewayURL, c)
	hc := newHTTPClient(70 * time.Second)
	t.Cleanup(hc.CloseIdleConnections)
	ctx := context.Background()

	// stack.yml, parsed by go-sdk's stack package as faas-cli parses it.
	stackFile := filepath.Join(t.TempDir(), "stack.yml")
	if err := os.WriteFile(stackFile, []byte(stackYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HTTPFN_BIN", httpfn) // faas-cli substitutes ${VAR} in stack.yml
	services, err := stack.ParseYAMLFile(stackFile, "", "", true)
	if err != nil {
		t.Fatalf("parse stack.yml: %v", err)
	}
	names := make([]string, 0, len(services.Functions))
	for n := range services.Functions {
		names = append(names, n)
	}
	sort.Strings(names)
	if !slices.Equal(names, []string{"classic", "emulated", "httpfn"}) || services.Functions["httpfn"].FProcess != httpfn {
		t.Fatalf("stack.yml: want classic, emulated and httpfn with fprocess %s, got %v and %+v", httpfn, names, services.Functions["httpfn"])
	}

	info, err := gw.GetInfo(ctx)
	if err != nil || info.Provider.Provider != "faas-gpu" || info.Provider.Orchestration == "" {
		t.Errorf("GetInfo through the gateway: want provider faas-gpu, got %+v, %v", info, err)
	}

	// faas-cli secret create, before the deploy that needs it.
	if code, err := gw.CreateSecret(ctx, types.Secret{Name: "api-key", Value: "gpu-s3cret"}); err != nil || code != http.StatusAccepted {
		t.Fatalf("CreateSecret api-key through the gateway: want 202, got %d, %v", code, err)
	}
	if code, err := gw.CreateSecret(ctx, types.Secret{Name: "api-key", Value: "again"}); code != http.StatusConflict {
		t.Errorf("CreateSecret api-key again through the gateway: want 409 (faas-cli: already exists), got %d, %v", code, err)
	}

	// faas-cli deploy -f stack.yml: PUT, and POST on 404.
	for _, name := range names {
		dep := toDeployment(name, services.Functions[name])
		code, err := gw.Update(ctx, dep)
		if code != http.StatusNotFound {
			t.Fatalf("deploy %s: the first PUT /system/functions must answer 404 for faas-cli to POST, got %d, %v", name, code, err)
		}
		if code, err = gw.Deploy(ctx, dep); err != nil || code != http.StatusAccepted {
			t.Fatalf("deploy %s: POST /system/functions: want 202, got %d, %v", name, code, err)
		}
	}
	// A second faas-cli deploy is a PUT.
	if code, err := gw.Update(ctx, toDeployment("classic", services.Functions["classic"])); err != nil || code != http.StatusAccepted {
		t.Errorf("re-deploy classic: PUT /system/functions: want 202, got %d, %v", code, err)
	}

	t.Run("list", func(t *testing.T) {
		fns, err := gw.GetFunctions(ctx, defaultNS)
		if err != nil {
			t.Fatalf("GetFunctions through the gateway: %v", err)
		}
		var got []string
		for _, f := range fns {
			got = append(got, f.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, names) {
			t.Errorf("GetFunctions through the gateway: want %v, got %v", names, got)
		}
	})

	t.Run("describe and ready", func(t *testing.T) {
		for _, name := range names {
			f := services.Functions[name]
			var st types.FunctionStatus
			eventually(t, 30*time.Second, name+" is ready through the gateway (faas-cli ready)", func() (bool, string) {
				st, err = gw.GetFunction(ctx, name, defaultNS)
				return err == nil && st.AvailableReplicas >= 1, fmt.Sprintf("%+v, %v", st, err)
			})
			if st.Name != name || st.Image != f.Image || st.Namespace != defaultNS || st.EnvProcess != f.FProcess || st.Replicas != 1 {
				t.Errorf("describe %s: fields not echoed: %+v", name, st)
			}
			if st.Annotations == nil || !mapContains(*st.Annotations, *f.Annotations) {
				t.Errorf("describe %s: want annotations %v, got %v", name, *f.Annotations, st.Annotations)
			}
			if f.Labels != nil && (st.Labels == nil || !mapContains(*st.Labels, *f.Labels)) {
				t.Errorf("describe %s: want labels %v, got %v", name, *f.Labels, st.Labels)
			}
			if !slices.Equal(st.Secrets, f.Secrets) {
				t.Errorf("describe %s: want secrets %v, got %v", name, f.Secrets, st.Secrets)
			}
		}
	})

	rep := p.gpus(t)
	uuids := map[string]bool{}
	for _, g := range rep.allGPUs() {
		uuids[g.UUID] = true
	}
	httpfnReplicas := rep.servingOf("httpfn")
	if len(httpfnReplicas) != 1 {
		t.Fatalf("/system/gpus: want one httpfn replica, got %v", httpfnReplicas)
	}
	var httpfnID string
	var httpfnGPU placement
	for id, ps := range httpfnReplicas {
		httpfnID, httpfnGPU = id, ps[0]
	}
	if httpfnGPU.SMPercent != 50 || httpfnGPU.MemoryBytes != 4<<30 {
		t.Errorf("/system/gpus: httpfn's slice: want 50%% and 4Gi, got %+v", httpfnGPU)
	}
	for id, ps := range rep.servingOf("classic") {
		if ps[0].SMPercent != 25 || ps[0].MemoryBytes != 2<<30 {
			t.Errorf("/system/gpus: classic replica %s: want 25%% and 2Gi, got %+v", id, ps)
		}
	}

	invoke := func(t *testing.T, method, path string, body []byte) result {
		t.Helper()
		return mustDo(t, hc, method, gatewayURL+path, body, nil, nil)
	}
	var lastEmulatedCall time.Time

	t.Run("invoke", func(t *testing.T) {
		r := invoke(t, http.MethodPost, "/function/classic", []byte("hello through the gateway"))
		if r.Code != http.StatusOK || string(r.Body) != "hello through the gateway" {
			t.Errorf("POST /function/classic (fprocess cat): want the body echoed, got %s", r)
		}
		r = invoke(t, http.MethodGet, "/function/httpfn/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", nil)
		if r.Code != http.StatusOK || string(r.Body) != "50" {
			t.Errorf("httpfn's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: want 50, got %s", r)
		}
		r = invoke(t, http.MethodGet, "/function/httpfn/env/NVIDIA_VISIBLE_DEVICES", nil)
		if r.Code != http.StatusOK || !uuids[string(r.Body)] || string(r.Body) != httpfnGPU.GPU {
			t.Errorf("httpfn's NVIDIA_VISIBLE_DEVICES: want the UUID of its GPU in /system/gpus (%s), got %s", httpfnGPU.GPU, r)
		}
		r = invoke(t, http.MethodGet, "/function/httpfn/env/CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", nil)
		if r.Code != http.StatusOK || string(r.Body) != "0=4096M" {
			t.Errorf("httpfn's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: want 0=4096M, got %s", r)
		}
		r = invoke(t, http.MethodGet, "/function/httpfn/env/secret_mount_path", nil)
		if r.Code != http.StatusOK || len(r.Body) == 0 {
			t.Fatalf("httpfn's secret_mount_path: got %s", r)
		}
		checkSecretFile(t, filepath.Join(string(r.Body), "api-key"), "gpu-s3cret")

		r = invoke(t, http.MethodPost, "/function/httpfn/sub/path?x=1&y=two", []byte("payload"))
		if r.Code != http.StatusOK || string(r.Body) != "payload" || r.Header.Get("X-Path") != "/sub/path" || r.Header.Get("X-Query") != "x=1&y=two" {
			t.Errorf("POST /function/httpfn/sub/path?x=1&y=two: want the body, X-Path /sub/path and X-Query x=1&y=two, got %s X-Path %q X-Query %q",
				r, r.Header.Get("X-Path"), r.Header.Get("X-Query"))
		}
		r = invoke(t, http.MethodGet, "/function/httpfn."+defaultNS+"/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", nil)
		if r.Code != http.StatusOK || string(r.Body) != "50" {
			t.Errorf("GET /function/httpfn.%s/...: want 50, got %s", defaultNS, r)
		}

		r = invoke(t, http.MethodPost, "/function/emulated", nil)
		lastEmulatedCall = time.Now()
		var id struct {
			Replica, Function, Model, GPU string
			Emulated                      bool
		}
		if r.Code != http.StatusOK || json.Unmarshal(r.Body, &id) != nil {
			t.Fatalf("POST /function/emulated: want 200 and the replica's JSON identity, got %s", r)
		}
		if !id.Emulated || id.Function != "emulated" || id.Model != "resnet50" || !uuids[id.GPU] || r.Header.Get("X-Faas-Gpu-Emulated") != "true" {
			t.Errorf("POST /function/emulated: want an emulated resnet50 replica on a listed GPU, got %s", r.Body)
		}
	})

	t.Run("invocation counts in the gateway's list", func(t *testing.T) {
		// Six calls reached httpfn in "invoke"; the gateway reads the
		// count from the provider's Prometheus answer.
		fns, err := gw.GetFunctions(ctx, defaultNS)
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]float64{}
		for _, f := range fns {
			counts[f.Name] = f.InvocationCount
		}
		if counts["httpfn"] != 6 || counts["classic"] != 1 || counts["emulated"] != 1 {
			t.Errorf("invocationCount through the gateway = %v, want httpfn 6, classic 1, emulated 1", counts)
		}
	})

	t.Run("scale from zero", func(t *testing.T) {
		// The gateway clamps scale requests to at least 1: only the provider
		// itself can be scaled to zero.
		if err := p.Client.ScaleFunction(ctx, "emulated", defaultNS, 0); err != nil {
			t.Fatalf("ScaleFunction emulated 0 on the provider: %v", err)
		}
		eventually(t, 10*time.Second, "emulated at 0 replicas, none in service", func() (bool, string) {
			_, st := p.status(t, defaultNS, "emulated")
			n := len(p.gpus(t).servingOf("emulated"))
			return st.Replicas == 0 && st.AvailableReplicas == 0 && n == 0, fmt.Sprintf("replicas %d available %d in service %d", st.Replicas, st.AvailableReplicas, n)
		})
		if st, err := gw.GetFunction(ctx, "emulated", defaultNS); err != nil || st.Replicas != 0 {
			t.Fatalf("describe emulated through the gateway: want 0 replicas, got %+v, %v", st, err)
		}
		// The gateway caches a ready status for 250 ms; the call below must
		// find the function at zero, not a stale cache entry.
		time.Sleep(time.Until(lastEmulatedCall.Add(time.Second)))

		start := time.Now()
		r := invoke(t, http.MethodPost, "/function/emulated", []byte("wake up"))
		if r.Code != http.StatusOK || string(r.Body) != "wake up" {
			t.Fatalf("first call to emulated at 0 replicas through the gateway (scale_from_zero): want 200 with the body echoed, got %s", r)
		}
		t.Logf("scale from zero: first call answered in %s by replica %s (model load: %s)", time.Since(start).Round(time.Millisecond),
			r.Header.Get("X-Faas-Gpu-Replica"), r.Header.Get("X-Faas-Gpu-Model-Load"))
		_, st := p.status(t, defaultNS, "emulated")
		if st.Replicas != 1 || st.AvailableReplicas != 1 {
			t.Errorf("after scale from zero: want 1 replica available, got replicas %d available %d", st.Replicas, st.AvailableReplicas)
		}
		serving := p.gpus(t).servingOf("emulated")
		if _, ok := serving[r.Header.Get("X-Faas-Gpu-Replica")]; !ok || len(serving) != 1 {
			t.Errorf("after scale from zero: want the replica that answered (%q) as the one emulated replica in service, got %v", r.Header.Get("X-Faas-Gpu-Replica"), serving)
		}
	})

	t.Run("logs", func(t *testing.T) {
		var msgs []logs.Message
		eventually(t, 10*time.Second, "GET /system/logs?name=httpfn&follow=false through the gateway returns httpfn's request lines", func() (bool, string) {
			r := mustDo(t, hc, http.MethodGet, gatewayURL+"/system/logs?name=httpfn&follow=false", nil, &c, nil)
			if r.Code != http.StatusOK {
				return false, r.String()
			}
			// The gateway streams the body but not the provider's
			// Content-Type (application/x-ndjson, checked in TestContract).
			msgs = msgs[:0]
			sc := bufio.NewScanner(bytes.NewReader(r.Body))
			for sc.Scan() {
				var m logs.Message
				if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
					return false, fmt.Sprintf("line %q is not a logs.Message: %v", sc.Text(), err)
				}
				msgs = append(msgs, m)
			}
			for _, m := range msgs {
				if m.Name == "httpfn" && m.Instance == httpfnID && strings.Contains(m.Text, "httpfn GET /env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") {
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d lines, none from replica %s with the request: %s", len(msgs), httpfnID, truncate(string(r.Body), 2000))
		})
		r := mustDo(t, hc, http.MethodGet, gatewayURL+"/system/logs?name=httpfn&follow=false", nil, nil, nil)
		if r.Code != http.StatusUnauthorized {
			t.Errorf("logs through the gateway without credentials: want 401, got %s", r)
		}
	})

	t.Run("secrets", func(t *testing.T) {
		list, err := gw.GetSecrets(ctx, defaultNS)
		if err != nil || len(list) != 1 || list[0].Name != "api-key" || list[0].Value != "" {
			t.Errorf("GetSecrets through the gateway: want [api-key] without value, got %+v, %v", list, err)
		}
	})

	t.Run("ui", func(t *testing.T) {
		r := mustDo(t, hc, http.MethodGet, gatewayURL+"/ui/", nil, &c, nil)
		if r.Code != http.StatusOK || !strings.Contains(strings.ToLower(string(r.Body)), "<html") {
			t.Errorf("GET /ui/ with credentials: want 200 and the UI's page, got %s", r)
		}
		r = mustDo(t, hc, http.MethodGet, gatewayURL+"/ui/", nil, nil, nil)
		if r.Code != http.StatusUnauthorized {
			t.Errorf("GET /ui/ without credentials: want 401, got %s", r)
		}
		// What the UI polls.
		r = mustDo(t, hc, http.MethodGet, gatewayURL+"/system/namespaces", nil, &c, nil)
		var nss []string
		if r.Code != http.StatusOK || json.Unmarshal(r.Body, &nss) != nil || len(nss) == 0 || nss[0] != defaultNS {
			t.Errorf("GET /system/namespaces through the gateway: want %s first, got %s", defaultNS, r)
		}
	})

	t.Run("remove", func(t *testing.T) {
		procs := p.processReplicas("httpfn")
		for _, name := range names {
			err := gw.DeleteFunction(ctx, name, defaultNS)
			if code := rec.take(); err != nil || code != http.StatusAccepted {
				t.Errorf("faas-cli remove %s: want 202, got %d, %v", name, code, err)
			}
			err = gw.DeleteFunction(ctx, name, defaultNS)
			if code := rec.take(); !sdkNotFound(err) || code != http.StatusNotFound {
				t.Errorf("faas-cli remove %s again: want 404 (No existing function to remove), got %d, %v", name, code, err)
			}
		}
		if fns, err := gw.GetFunctions(ctx, defaultNS); err != nil || len(fns) != 0 {
			t.Errorf("list after remove: want none, got %+v, %v", fns, err)
		}
		r := invoke(t, http.MethodGet, "/function/httpfn/env/PATH", nil)
		if r.Code != http.StatusNotFound {
			t.Errorf("invoking a removed function through the gateway: want 404, got %s", r)
		}
		for _, pr := range procs {
			eventually(t, 10*time.Second, fmt.Sprintf("httpfn process %d (replica %s) ends with its function", pr.PID, pr.ID), func() (bool, string) {
				return !processAlive(pr.PID), "still running"
			})
		}
		err := gw.DeleteSecret(ctx, "api-key", defaultNS)
		if code := rec.take(); err != nil || code != http.StatusAccepted {
			t.Errorf("secret remove api-key through the gateway: want 202, got %d, %v", code, err)
		}
		requireNothingAllocated(t, p)
	})
}
