package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/openfaas/faas-provider/types"
	"github.com/openfaas/go-sdk/stack"
)

// torchPython is the folder of a python3 on PATH that has torch,
// torchvision and venv (Debian: python3-torch python3-torchvision
// python3-venv). Missing, the test skips; with CI set it fails.
func torchPython(t *testing.T) string {
	t.Helper()
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		py := filepath.Join(dir, "python3")
		if _, err := os.Stat(py); err != nil {
			continue
		}
		if exec.Command(py, "-c", "import torch, torchvision, venv, ensurepip").Run() == nil {
			return dir
		}
	}
	msg := "no python3 on PATH has torch, torchvision and venv (Debian: apt-get install python3-torch python3-torchvision python3-venv; .ci/run does)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; skipped because CI is not set")
	return ""
}

// copyTree copies the files under src into dst, as faas-cli copies a
// template's folders.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy %s to %s: %v", src, dst, err)
	}
}

// faasCLINew does what `faas-cli template pull <this repo>` and then
// `faas-cli new --lang pytorch-gpu NAME` do in folder dir: the repo's
// template/ is copied into dir/template, the template's function/ becomes
// the handler folder dir/NAME, and the function is added to stack.yml.
func faasCLINew(t *testing.T, dir, lang, name string) {
	t.Helper()
	tmpl := filepath.Join(dir, "template")
	if _, err := os.Stat(tmpl); err != nil {
		copyTree(t, filepath.Join(repoRoot, "template"), tmpl)
	}
	if _, err := os.Stat(filepath.Join(tmpl, lang, "template.yml")); err != nil {
		t.Fatalf("template %s has no template.yml: %v", lang, err)
	}
	copyTree(t, filepath.Join(tmpl, lang, "function"), filepath.Join(dir, name))
}

// buildStack writes stackYML as dir's stack.yml, parses it as faas-cli
// does and shrinkwraps its functions (shrinkwrap).
func buildStack(t *testing.T, dir, stackYML string) *stack.Services {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "stack.yml"), []byte(stackYML), 0o644); err != nil {
		t.Fatal(err)
	}
	services, err := stack.ParseYAMLFile(filepath.Join(dir, "stack.yml"), "", "", true)
	if err != nil {
		t.Fatalf("parse stack.yml: %v", err)
	}
	shrinkwrap(t, dir, services)
	return services
}

// shrinkwrap does `faas-cli build --shrinkwrap`: build/NAME is the
// template with the handler folder as its function/.
func shrinkwrap(t *testing.T, dir string, services *stack.Services) {
	t.Helper()
	for name, f := range services.Functions {
		out := filepath.Join(dir, "build", name)
		copyTree(t, filepath.Join(dir, "template", f.Language), out)
		if err := os.RemoveAll(filepath.Join(out, "function")); err != nil {
			t.Fatal(err)
		}
		copyTree(t, filepath.Join(dir, f.Handler), filepath.Join(out, "function"))
	}
}

// testPNG is a small PNG, the request body of the classifier.
func testPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 40, 30))
	for x := range 40 {
		for y := range 30 {
			img.Set(x, y, color.RGBA{uint8(x * 6), uint8(y * 8), 90, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// promSamples parses Prometheus text into "name{labels}" -> value.
func promSamples(text string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// edgeHandler is a handler written by the test for the bad cases: infer
// raises for the body "boom", and the model "huge" (128 MiB of weights)
// fits no small memory limit.
const edgeHandler = `import torch


def load(model_name, device):
    if model_name == "huge":
        return torch.nn.Linear(4096, 8192).to(device)
    return torch.nn.Linear(4, 2).to(device)


def infer(batch):
    if any(r.body == b"boom" for r in batch):
        raise RuntimeError("the handler failed on purpose")
    return [{"model": r.model_name, "body": r.body.decode()} for r in batch]
`

// TestGPUTemplate is issue 15: the pytorch-gpu template with a real
// PyTorch model (torchvision, random weights, on CPU), from faas-cli new
// through the real gateway to a profile.
// modelList reads a replica's answer to GET or POST /_/models: its
// models' names and bytes, most recently used first.
func modelList(t *testing.T, r result) (names []string, bytes []int64) {
	t.Helper()
	var got struct {
		Models []struct {
			Name  string `json:"name"`
			Bytes int64  `json:"bytes"`
		} `json:"models"`
	}
	if r.Code != http.StatusOK || json.Unmarshal(r.Body, &got) != nil {
		t.Fatalf("/_/models: want 200 and the list as JSON, got %s", r)
	}
	for _, m := range got.Models {
		names, bytes = append(names, m.Name), append(bytes, m.Bytes)
	}
	return names, bytes
}

func TestGPUTemplate(t *testing.T) {
	pyDir := torchPython(t)
	gatewayBin.get(t)
	dir := t.TempDir()
	faasCLINew(t, dir, "pytorch-gpu", "classifier")
	// The user's handler: the example classifier.
	copyTree(t, filepath.Join(repoRoot, "examples", "pytorch-classifier"), filepath.Join(dir, "classifier"))
	for _, name := range []string{"edgefn", "bigfn"} {
		faasCLINew(t, dir, "pytorch-gpu", name)
		if err := os.WriteFile(filepath.Join(dir, name, "handler.py"), []byte(edgeHandler), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// 48Mi holds resnet18 (45 MiB of weights) or mobilenet_v3_small
	// (10 MiB), not both. Images are resized to 32x32 and torch gets one
	// thread, so the test stays cheap on two shared cores.
	stackYML := `version: 1.0
provider:
  name: openfaas
  gateway: http://127.0.0.1:8080
functions:
  classifier:
    lang: pytorch-gpu
    handler: ./classifier
    image: ghcr.io/faas-gpu/classifier:latest
    environment:
      FAAS_GPU_BATCH: "8"
      FAAS_GPU_BATCH_WINDOW_MS: "100"
      CLASSIFIER_INPUT_SIZE: "32"
      FAAS_GPU_CPU_THREADS: "1"
    annotations:
      com.openfaas.gpu.model: mobilenet_v3_small
      com.openfaas.gpu.sm: "50"
      com.openfaas.gpu.memory: 48Mi
  edgefn:
    lang: pytorch-gpu
    handler: ./edgefn
    image: ghcr.io/faas-gpu/edgefn:latest
    environment:
      FAAS_GPU_CPU_THREADS: "1"
    annotations:
      com.openfaas.gpu.model: tiny
      com.openfaas.gpu.sm: "10"
      com.openfaas.gpu.memory: 64Mi
  bigfn:
    lang: pytorch-gpu
    handler: ./bigfn
    image: ghcr.io/faas-gpu/bigfn:latest
    environment:
      FAAS_GPU_CPU_THREADS: "1"
    annotations:
      com.openfaas.gpu.model: huge
      com.openfaas.gpu.sm: "10"
      com.openfaas.gpu.memory: 64Mi
`
	services := buildStack(t, dir, stackYML)

	c := newCreds(t)
	// A short warm lifetime, so that scale to zero and back pays a real
	// cold start (the last subtest) instead of reusing the warm replica.
	p := startProviderWith(t, c, t.TempDir(), 0, providerOpts{Dir: dir, Env: []string{"PATH=" + pyDir + string(os.PathListSeparator) + os.Getenv("PATH")},
		Args: []string{"-warm-ttl", "2s"}})
	startGateway(t, p)
	gw, _ := newSDKClient(t, gatewayURL, c)
	hc := newHTTPClient(70 * time.Second)
	t.Cleanup(hc.CloseIdleConnections)
	ctx := context.Background()
	for _, name := range []string{"classifier", "edgefn", "bigfn"} {
		if code, err := gw.Deploy(ctx, toDeployment(name, services.Functions[name])); err != nil || code != http.StatusAccepted {
			t.Fatalf("deploy %s: want 202, got %d, %v", name, code, err)
		}
	}
	for _, name := range []string{"classifier", "edgefn"} {
		p.waitReady(t, defaultNS, name, 1, 3*time.Minute)
	}
	img := testPNG(t)
	fnURL := gatewayURL + "/function/classifier"
	metrics := func(t *testing.T) map[string]float64 {
		t.Helper()
		r := mustDo(t, hc, http.MethodGet, fnURL+"/_/metrics", nil, nil, nil)
		if r.Code != http.StatusOK {
			t.Fatalf("GET /_/metrics: want 200, got %s", r)
		}
		return promSamples(string(r.Body))
	}
	type top struct {
		Class int     `json:"class"`
		P     float64 `json:"p"`
	}
	type reply struct {
		Model string `json:"model"`
		Batch int    `json:"batch"`
		Top   []top  `json:"top"`
	}
	classify := func(t *testing.T, model string) reply {
		t.Helper()
		hdr := map[string]string{"Content-Type": "image/png"}
		if model != "" {
			hdr["X-Model"] = model
		}
		r := mustDo(t, hc, http.MethodPost, fnURL, img, nil, hdr)
		var got reply
		if r.Code != http.StatusOK || json.Unmarshal(r.Body, &got) != nil || len(got.Top) != 3 {
			t.Fatalf("classify with %q: want 200 and the top 3 classes as JSON, got %s", model, r)
		}
		return got
	}

	t.Run("an image gets its classes, anything else 400", func(t *testing.T) {
		got := classify(t, "")
		if got.Model != "mobilenet_v3_small" {
			t.Errorf("model: want the function's own mobilenet_v3_small, got %q", got.Model)
		}
		for _, body := range [][]byte{[]byte("not an image"), nil, img[:20]} {
			r := mustDo(t, hc, http.MethodPost, fnURL, body, nil, nil)
			if r.Code != http.StatusBadRequest || !strings.Contains(string(r.Body), "image") {
				t.Errorf("POST %q: want 400 saying it is not an image, got %s", truncate(string(body), 20), r)
			}
		}
	})

	t.Run("a burst is batched", func(t *testing.T) {
		before := metrics(t)
		const n = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		maxBatch := 0
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := do(hc, http.MethodPost, fnURL, img, nil, map[string]string{"Content-Type": "image/png"})
				var got reply
				if err != nil || r.Code != http.StatusOK || json.Unmarshal(r.Body, &got) != nil {
					t.Errorf("burst: want 200 JSON, got %v %v", r, err)
					return
				}
				mu.Lock()
				maxBatch = max(maxBatch, got.Batch)
				mu.Unlock()
			}()
		}
		wg.Wait()
		after := metrics(t)
		batches := after["faas_gpu_template_batch_size_count"] - before["faas_gpu_template_batch_size_count"]
		requests := after["faas_gpu_template_batch_size_sum"] - before["faas_gpu_template_batch_size_sum"]
		singles := after[`faas_gpu_template_batch_size_bucket{le="1"}`] - before[`faas_gpu_template_batch_size_bucket{le="1"}`]
		t.Logf("%d concurrent requests: %v batches, %v of one, largest %d", n, batches, singles, maxBatch)
		if requests != n || batches >= n || singles == batches || maxBatch < 2 {
			t.Errorf("%d concurrent requests within a 100 ms window: want them in fewer batches than requests, got %v requests in %v batches (%v of one), largest batch %d",
				n, requests, batches, singles, maxBatch)
		}
		if after["faas_gpu_template_queue_wait_seconds_count"]-before["faas_gpu_template_queue_wait_seconds_count"] != n {
			t.Errorf("queue wait: want %d observations, got %v", n, after["faas_gpu_template_queue_wait_seconds_count"]-before["faas_gpu_template_queue_wait_seconds_count"])
		}
	})

	t.Run("two models by X-Model, evicted within the memory limit", func(t *testing.T) {
		resident := func(t *testing.T) []string {
			t.Helper()
			names, bytes := modelList(t, mustDo(t, hc, http.MethodGet, fnURL+"/_/models", nil, nil, nil))
			for i, b := range bytes {
				if b <= 0 || b > 48<<20 {
					t.Errorf("/_/models: %s takes %d bytes, want 1 to 48Mi", names[i], b)
				}
			}
			return names
		}
		steps := []struct {
			model   string
			want    []string // resident after, most recent first
			evicted string
		}{
			{"resnet18", []string{"resnet18"}, "mobilenet_v3_small"},
			{"resnet18", []string{"resnet18"}, ""},
			{"mobilenet_v3_small", []string{"mobilenet_v3_small"}, "resnet18"},
		}
		for _, s := range steps {
			before := metrics(t)
			if got := classify(t, s.model); got.Model != s.model {
				t.Errorf("X-Model %s: answered by %q", s.model, got.Model)
			}
			if got := resident(t); strings.Join(got, ",") != strings.Join(s.want, ",") {
				t.Errorf("after X-Model %s: want %v resident, got %v", s.model, s.want, got)
			}
			after := metrics(t)
			for _, m := range []string{"resnet18", "mobilenet_v3_small"} {
				k := `faas_gpu_template_model_evictions_total{model="` + m + `"}`
				if want, got := map[bool]float64{true: 1}[m == s.evicted], after[k]-before[k]; got != want {
					t.Errorf("after X-Model %s: want %v eviction(s) of %s, got %v", s.model, want, m, got)
				}
			}
		}
		r := mustDo(t, hc, http.MethodPost, fnURL, img, nil, map[string]string{"X-Model": "no_such_model"})
		if r.Code != http.StatusBadRequest || !strings.Contains(string(r.Body), "no_such_model") {
			t.Errorf("X-Model no_such_model: want 400 naming it, got %s", r)
		}
	})

	t.Run("a model loaded in idle time sits beside the others, evicting none", func(t *testing.T) {
		// After the last subtest mobilenet_v3_small (10 MiB) alone is
		// resident in 48Mi: squeezenet1_1 (5 MiB) fits beside it,
		// resnet18 (45 MiB) does not.
		load := func(t *testing.T, body string) result {
			t.Helper()
			return mustDo(t, hc, http.MethodPost, fnURL+"/_/models", []byte(body), nil, map[string]string{"Content-Type": "application/json"})
		}
		before := metrics(t)
		if got, _ := modelList(t, load(t, `{"model": "squeezenet1_1"}`)); strings.Join(got, ",") != "mobilenet_v3_small,squeezenet1_1" {
			t.Errorf("after loading squeezenet1_1: want mobilenet_v3_small,squeezenet1_1 (the load least recently used), got %v", got)
		}
		if r := load(t, `{"model": "resnet18"}`); r.Code != http.StatusInsufficientStorage {
			t.Errorf("resnet18 beside them: want 507, got %s", r)
		}
		for _, body := range []string{`{}`, `not json`, `{"model": "../x"}`} {
			if r := load(t, body); r.Code != http.StatusBadRequest {
				t.Errorf("load %s: want 400, got %s", body, r)
			}
		}
		if r := load(t, `{"model": "no_such_model"}`); r.Code != http.StatusBadRequest || !strings.Contains(string(r.Body), "no_such_model") {
			t.Errorf("load no_such_model: want 400 naming it, got %s", r)
		}
		after := metrics(t)
		for _, m := range []string{"resnet18", "mobilenet_v3_small", "squeezenet1_1"} {
			k := `faas_gpu_template_model_evictions_total{model="` + m + `"}`
			if got := after[k] - before[k]; got != 0 {
				t.Errorf("%s evicted %v times by loads in idle time", m, got)
			}
		}
		if got := classify(t, "squeezenet1_1"); got.Model != "squeezenet1_1" {
			t.Errorf("X-Model squeezenet1_1 after its load: answered by %q", got.Model)
		}
		k := `faas_gpu_template_model_loads_total{model="squeezenet1_1"}`
		if got := metrics(t)[k] - before[k]; got != 1 {
			t.Errorf("squeezenet1_1 loaded %v times, want once (its request found it resident)", got)
		}
	})

	t.Run("bad handler and too big models", func(t *testing.T) {
		edge := gatewayURL + "/function/edgefn"
		pids := func(fn string) []int {
			var out []int
			for _, r := range p.processReplicas(fn) {
				out = append(out, r.PID)
			}
			return out
		}
		started := pids("edgefn")
		r := mustDo(t, hc, http.MethodPost, edge, []byte("boom"), nil, nil)
		if r.Code != http.StatusInternalServerError || !strings.Contains(string(r.Body), "failed on purpose") {
			t.Errorf("infer raising: want 500 with its error, got %s", r)
		}
		if r := mustDo(t, hc, http.MethodPost, edge, []byte("fine"), nil, nil); r.Code != http.StatusOK || !strings.Contains(string(r.Body), `"body": "fine"`) {
			t.Errorf("after infer raised: want the replica to keep serving, got %s", r)
		}
		r = mustDo(t, hc, http.MethodPost, edge, []byte("x"), nil, map[string]string{"X-Model": "huge"})
		if r.Code != http.StatusInsufficientStorage || !strings.Contains(string(r.Body), "over this replica's memory limit") {
			t.Errorf("X-Model huge over 64Mi: want 507 saying it does not fit, got %s", r)
		}
		if r := mustDo(t, hc, http.MethodPost, edge, []byte("again"), nil, nil); r.Code != http.StatusOK {
			t.Errorf("after a model too big: want the replica to keep serving its own, got %s", r)
		}
		if got := pids("edgefn"); fmt.Sprint(got) != fmt.Sprint(started) {
			t.Errorf("edgefn restarted: replica pids %v, then %v", started, got)
		}
		logsOf := func(fn string) string {
			var text []string
			for _, m := range getLogs(t, p, fn, 1000) {
				text = append(text, m.Text)
			}
			return strings.Join(text, "\n")
		}
		if l := logsOf("edgefn"); !strings.Contains(l, "infer raised") || !strings.Contains(l, "the handler failed on purpose") {
			t.Errorf("edgefn's logs: want the handler's error, got:\n%s", truncate(l, 4000))
		}
		// bigfn's own model can never fit: it stays up and unready, the
		// reason in its logs, and is not restarted over and over.
		eventually(t, time.Minute, "bigfn's logs say its model does not fit", func() (bool, string) {
			l := logsOf("bigfn")
			return strings.Contains(l, "model huge needs") && strings.Contains(l, "over this replica's memory limit"), l
		})
		time.Sleep(2 * time.Second)
		if code, st := p.status(t, defaultNS, "bigfn"); code != http.StatusOK || st.AvailableReplicas != 0 {
			t.Errorf("bigfn: want it listed with no available replica, got %d %+v", code, st)
		}
		// Its image declares it can be parked, so a parked process may run
		// beside the replica: each process started once, one replica placed.
		starts := map[string]int{}
		for _, r := range p.processReplicas("bigfn") {
			starts[r.ID]++
		}
		placed := 0
		for _, m := range p.logEntries("replica placed") {
			if m["function"] == "bigfn" {
				placed++
			}
		}
		if placed != 1 || len(starts) == 0 || slices.ContainsFunc(slices.Collect(maps.Values(starts)), func(n int) bool { return n > 1 }) {
			t.Errorf("bigfn: want one replica placed whose process stays up, got %d placed, starts by process %v", placed, starts)
		}
		if err := gw.DeleteFunction(ctx, "bigfn", defaultNS); err != nil {
			t.Errorf("remove bigfn: %v", err)
		}
	})

	t.Run("profile, loaded back with -profiles", func(t *testing.T) {
		pdir := t.TempDir()
		body := filepath.Join(t.TempDir(), "img.png")
		if err := os.WriteFile(body, img, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(pdir, "mobilenet_v3_small.yaml")
		cmd := exec.Command(providerBin.get(t), "profile", "--gateway", p.URL, "--function", "classifier",
			"--sm", "100", "--batch", "1,4", "--duration", "3s", "--warmup", "1s", "--concurrency", "2",
			"--body", body, "--content-type", "image/png", "--ready-timeout", "2m", "--out", out)
		cmd.Env = append(os.Environ(), "OPENFAAS_USER="+c.User, "OPENFAAS_PASSWORD="+c.Password)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("faas-gpu profile: %v\n%s\n%s", err, stdout.String(), stderr.String())
		}
		t.Logf("faas-gpu profile of the classifier on CPU:\n%s", stdout.String())
		// The copies must run the function itself from its build folder:
		// an emulated copy would measure the emulation.
		for _, copy := range []string{"classifier-profile-100", "classifier-profile-100-b4"} {
			if len(p.processReplicas(copy)) == 0 {
				t.Errorf("%s ran no process: the profile measured an emulated worker, not the model", copy)
			}
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		prof, err := profiles.Parse(data)
		if err != nil {
			t.Fatalf("the written profile does not parse: %v\n%s", err, data)
		}
		lat := map[int]float64{}
		for _, pt := range prof.Points {
			lat[pt.Batch] = pt.Latency
		}
		if prof.Model != "mobilenet_v3_small" || len(lat) != 2 || !(lat[4] > lat[1]) {
			t.Errorf("profile: want model mobilenet_v3_small with batch 4 slower than batch 1, got %s", data)
		}
		// A second provider reads it back and plans the model from it.
		c2 := newCreds(t)
		port := freePort(t)
		serve := exec.Command(providerBin.get(t), "serve", "-state-dir", t.TempDir(), "-profiles", pdir, "-log-format", "json")
		serve.Env = append(withoutEnv(os.Environ(), "port", "basic_auth", "secret_mount_path"),
			"port="+strconv.Itoa(port), "basic_auth=true", "secret_mount_path="+c2.Dir)
		sp := startProc(t, "faas-gpu serve -profiles", serve)
		u := "http://127.0.0.1:" + strconv.Itoa(port)
		waitHealthy(t, sp, u+"/healthz", 30*time.Second)
		dep := types.FunctionDeployment{Service: "planned", Image: "example.com/planned",
			Annotations: &map[string]string{"com.openfaas.gpu.model": "mobilenet_v3_small"}}
		if r := mustDo(t, hc, http.MethodPost, u+"/system/functions", mustJSON(t, dep), &c2, nil); r.Code != http.StatusAccepted {
			t.Fatalf("deploy planned: want 202, got %s", r)
		}
		r := mustDo(t, hc, http.MethodGet, u+"/system/gpus", nil, &c2, nil)
		var rep struct {
			Functions []struct {
				Name     string `json:"name"`
				Decision string `json:"decision"`
			} `json:"functions"`
		}
		if r.Code != http.StatusOK || json.Unmarshal(r.Body, &rep) != nil {
			t.Fatalf("GET /system/gpus: %s", r)
		}
		var decision string
		for _, f := range rep.Functions {
			if f.Name == "planned" {
				decision = f.Decision
			}
		}
		cited := false
		for _, l := range lat {
			cited = cited || strings.Contains(decision, fmt.Sprintf("%.1f ms", l))
		}
		if !strings.Contains(decision, prof.GPU) || !cited {
			t.Errorf("a function of model mobilenet_v3_small: want its decision from the measured profile (%v ms on %s), got %q", lat, prof.GPU, decision)
		}
	})

	t.Run("scale to zero and back: the load time shows", func(t *testing.T) {
		body := []byte(`{"serviceName":"classifier","namespace":"` + defaultNS + `","replicas":0}`)
		if r := mustDo(t, hc, http.MethodPost, p.URL+"/system/scale-function/classifier", body, &p.Creds, nil); r.Code != http.StatusAccepted {
			t.Fatalf("scale classifier to 0: want 202, got %s", r)
		}
		eventually(t, 30*time.Second, "classifier at zero", func() (bool, string) {
			code, st := p.status(t, defaultNS, "classifier")
			return code == http.StatusOK && st.Replicas == 0 && st.AvailableReplicas == 0, fmt.Sprintf("%d %+v", code, st)
		})
		type replicaView struct {
			ID                string             `json:"id"`
			Function          string             `json:"function"`
			Ready             bool               `json:"ready"`
			ReadyAfterSeconds *float64           `json:"readyAfterSeconds"`
			ModelLoadSeconds  map[string]float64 `json:"modelLoadSeconds"`
		}
		classifiers := func(t *testing.T) []replicaView {
			t.Helper()
			r := mustDo(t, hc, http.MethodGet, p.URL+"/system/gpus", nil, &p.Creds, nil)
			var rep struct {
				Nodes []struct {
					GPUs []struct {
						Replicas []replicaView `json:"replicas"`
					} `json:"gpus"`
				} `json:"nodes"`
			}
			if r.Code != http.StatusOK || json.Unmarshal(r.Body, &rep) != nil {
				t.Fatalf("GET /system/gpus: %s", r)
			}
			var out []replicaView
			for _, n := range rep.Nodes {
				for _, g := range n.GPUs {
					for _, rr := range g.Replicas {
						if rr.Function == "classifier" {
							out = append(out, rr)
						}
					}
				}
			}
			return out
		}
		// The warm replica keeps the model for the provider's -warm-ttl
		// (2 s here), then goes with it: the wake-up is a cold start.
		eventually(t, 30*time.Second, "the warm classifier replica expired", func() (bool, string) {
			left := classifiers(t)
			return len(left) == 0, fmt.Sprintf("%+v", left)
		})
		// The gateway wakes it on this call (scale_from_zero) and holds
		// the call until the replica has loaded its model.
		starts := len(p.processReplicas("classifier"))
		classify(t, "")
		if n := len(p.processReplicas("classifier")) - starts; n != 1 {
			t.Fatalf("woken: %d new processes, want 1 (a cold start)", n)
		}
		load := metrics(t)[`faas_gpu_template_model_load_seconds{model="mobilenet_v3_small"}`]
		var woken replicaView
		eventually(t, 30*time.Second, "the woken replica's model load in /system/gpus", func() (bool, string) {
			reps := classifiers(t)
			if len(reps) == 1 && reps[0].Ready && reps[0].ModelLoadSeconds["mobilenet_v3_small"] > 0 {
				woken = reps[0]
				return true, ""
			}
			return false, fmt.Sprintf("%+v", reps)
		})
		got := woken.ModelLoadSeconds["mobilenet_v3_small"]
		t.Logf("cold start after scale to zero: model load %.3f s (its own metric), %.3f s in /system/gpus, ready after %s s", load, got, fmtSeconds(woken.ReadyAfterSeconds))
		if load <= 0 || math.Abs(got-load) > 1e-3 {
			t.Errorf("modelLoadSeconds in /system/gpus = %.6f, want the replica's own load metric %.6f", got, load)
		}
		if woken.ReadyAfterSeconds == nil || *woken.ReadyAfterSeconds < got {
			t.Errorf("readyAfterSeconds %v should include the model load (%.3f s)", woken.ReadyAfterSeconds, got)
		}
	})

}

// fmtSeconds prints an optional duration in seconds.
func fmtSeconds(s *float64) string {
	if s == nil {
		return "?"
	}
	return strconv.FormatFloat(*s, 'f', 3, 64)
}
