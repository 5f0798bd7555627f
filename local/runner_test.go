package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// httpfnBinary builds testdata/httpfn once per test binary; TestMain removes
// it. A per-test t.TempDir would vanish with the first test that built it.
var httpfn struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if httpfn.dir != "" {
		_ = os.RemoveAll(httpfn.dir)
	}
	os.Exit(code)
}

func httpfnBinary(t *testing.T) string {
	t.Helper()
	httpfn.once.Do(func() {
		httpfn.dir, httpfn.err = os.MkdirTemp("", "faas-gpu-httpfn-")
		if httpfn.err != nil {
			return
		}
		httpfn.path = filepath.Join(httpfn.dir, "httpfn")
		out, err := exec.Command("go", "build", "-o", httpfn.path, "./testdata/httpfn").CombinedOutput()
		if err != nil {
			httpfn.err = errors.New("go build testdata/httpfn: " + err.Error() + "\n" + string(out))
		}
	})
	if httpfn.err != nil {
		t.Fatal(httpfn.err)
	}
	return httpfn.path
}

// asHTTPFn makes spec's replicas run testdata/httpfn as an HTTP-mode
// process, with env added to its variables.
func asHTTPFn(t *testing.T, spec scheduler.Function, env map[string]string) scheduler.Function {
	t.Helper()
	spec.Deployment.EnvProcess = httpfnBinary(t)
	spec.Deployment.EnvVars = map[string]string{"mode": "http"}
	for k, v := range env {
		spec.Deployment.EnvVars[k] = v
	}
	return spec
}

// sinkRecorder collects the lines a runner writes to its LogSink.
type sinkRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (s *sinkRecorder) sink(instance, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines = append(s.lines, instance+": "+text)
}

func (s *sinkRecorder) has(sub string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func startRunner(t *testing.T, r runner) {
	t.Helper()
	if err := r.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Stop(ctx)
	})
}

type reply struct {
	status int
	header http.Header
	body   string
	took   time.Duration
}

func do(t *testing.T, method, url, body string, header map[string]string) reply {
	t.Helper()
	rep, err := try(method, url, body, header)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// try is do for goroutines other than the test's, which may not t.Fatal.
func try(method, url, body string, header map[string]string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return reply{}, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	began := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return reply{resp.StatusCode, resp.Header, string(b), time.Since(began)}, nil
}

func emulatedSpec(latency, load time.Duration) ReplicaSpec {
	return ReplicaSpec{
		ID: "fn-0", Function: "fn", Namespace: "openfaas-fn", WorkDir: os.TempDir(),
		Env:       []string{"NVIDIA_VISIBLE_DEVICES=GPU-1234", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"},
		Emulation: Emulation{Latency: latency, LoadTime: load, Model: "resnet50"},
	}
}

func TestEmulatedColdThenWarm(t *testing.T) {
	const latency, load = 20 * time.Millisecond, 150 * time.Millisecond
	var sink sinkRecorder
	r := newEmulatedRunner(emulatedSpec(latency, load), sink.sink, zap.NewNop()).(*emulatedRunner)
	if r.Ready() {
		t.Fatal("ready before Start")
	}
	began := time.Now()
	startRunner(t, r)
	// It loads its model before it is ready, as the template does: not
	// ready yet, and it says why.
	if r.Ready() || r.Unready() == "" || !strings.HasPrefix(r.URL(), "http://127.0.0.1:") {
		t.Fatalf("after Start: ready=%v (%q) url=%q, want loading", r.Ready(), r.Unready(), r.URL())
	}
	if !sink.has("emulated GPU worker: no process given") {
		t.Errorf("no start line in sink: %q", sink.lines)
	}
	if got := getModels(t, r.URL()); len(got) != 0 {
		t.Errorf("listed %q while loading, want nothing", got)
	}
	// A request sent before it is ready (nothing routes one) waits for
	// the load.
	if rep := do(t, http.MethodPost, r.URL()+"/", "", nil); rep.header.Get(headerModelLoad) != "cold" || time.Since(began) < latency+load {
		t.Fatalf("request while loading: %q after %s, want cold after the %s load", rep.header.Get(headerModelLoad), time.Since(began), load)
	}
	if !r.Ready() || r.Unready() != "" {
		t.Fatalf("loaded: ready=%v (%q), want ready", r.Ready(), r.Unready())
	}

	tests := []struct {
		name    string
		body    string
		load    string
		minTook time.Duration
		maxTook time.Duration
	}{
		{"first once ready is warm", "", "warm", latency, load},
		{"second is warm", "", "warm", latency, load},
		{"body is echoed", "an image", "warm", latency, load},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := do(t, http.MethodPost, r.URL()+"/", tc.body, map[string]string{"Content-Type": "image/png"})
			if rep.status != http.StatusOK {
				t.Fatalf("status %d", rep.status)
			}
			if got := rep.header.Get(headerModelLoad); got != tc.load {
				t.Errorf("model load %q, want %q", got, tc.load)
			}
			if rep.header.Get(headerReplica) != "fn-0" || rep.header.Get(headerEmulated) != "true" {
				t.Errorf("headers %v", rep.header)
			}
			if rep.took < tc.minTook || rep.took >= tc.maxTook {
				t.Errorf("took %s, want in [%s, %s)", rep.took, tc.minTook, tc.maxTook)
			}
			if tc.body != "" {
				if rep.body != tc.body || rep.header.Get("Content-Type") != "image/png" {
					t.Errorf("echo: %q (%s)", rep.body, rep.header.Get("Content-Type"))
				}
				return
			}
			var id emulatedIdentity
			if err := json.Unmarshal([]byte(rep.body), &id); err != nil {
				t.Fatalf("body %q: %v", rep.body, err)
			}
			if id.Replica != "fn-0" || id.Function != "fn" || id.Model != "resnet50" || !id.Emulated ||
				id.GPU != "GPU-1234" || id.SMPercent == nil || *id.SMPercent != 30 {
				t.Errorf("identity %+v", id)
			}
		})
	}
}

func TestEmulatedConcurrentFirstRequestsShareOneLoad(t *testing.T) {
	const load = 200 * time.Millisecond
	r := newEmulatedRunner(emulatedSpec(0, load), func(string, string) {}, zap.NewNop())
	startRunner(t, r)

	const n = 8
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			rep, err := try(http.MethodGet, r.URL()+"/", "", nil)
			if err != nil {
				t.Error(err)
			}
			replies[i] = rep
		})
	}
	wg.Wait()
	for i, rep := range replies {
		if rep.header.Get(headerModelLoad) != "cold" {
			t.Errorf("request %d: %q, want cold", i, rep.header.Get(headerModelLoad))
		}
		// One shared load: nobody waits for a second one.
		if rep.took >= 2*load {
			t.Errorf("request %d took %s, a load is %s", i, rep.took, load)
		}
	}
	if rep := do(t, http.MethodGet, r.URL()+"/", "", nil); rep.header.Get(headerModelLoad) != "warm" {
		t.Errorf("after the load: %q, want warm", rep.header.Get(headerModelLoad))
	}
}

func TestEmulatedLoadIsInterruptible(t *testing.T) {
	r := newEmulatedRunner(emulatedSpec(0, 5*time.Second), func(string, string) {}, zap.NewNop())
	startRunner(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.URL()+"/", nil)
	began := time.Now()
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("request during a 5 s load did not time out")
	}
	// Stop must not wait for the abandoned load either.
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer stopCancel()
	if err := r.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("request and Stop took %s", took)
	}
}

func TestEmulatedStopClosesListener(t *testing.T) {
	r := newEmulatedRunner(emulatedSpec(0, 0), func(string, string) {}, zap.NewNop())
	startRunner(t, r)
	url := r.URL()
	do(t, http.MethodGet, url+"/", "", nil)
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Error("ready after Stop")
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	if resp, err := client.Get(url + "/"); err == nil {
		resp.Body.Close()
		t.Error("listener still answers after Stop")
	}
}

func TestClassic(t *testing.T) {
	tests := []struct {
		name     string
		process  string
		method   string
		path     string
		body     string
		ctype    string
		status   int
		want     []string // substrings of the body
		wantType string
		sink     string // substring of a sink line
	}{
		{name: "cat echoes stdin", process: "cat", method: http.MethodPost, path: "/", body: "ping",
			status: 200, want: []string{"ping"}, wantType: "text/plain"},
		{name: "env sees placement and CGI vars", process: "env", method: http.MethodPost,
			path: "/some/path?x=1", body: "{}", ctype: "application/json", status: 200,
			want: []string{"NVIDIA_VISIBLE_DEVICES=GPU-1234", "Http_Method=POST", "Http_Path=/some/path",
				"Http_Query=x=1", "Http_Content_Type=application/json", "Http_X_Test=yes"},
			wantType: "application/json"},
		{name: "false gives 500", process: "false", method: http.MethodGet, path: "/", status: 500},
		{name: "stderr is the 500 body and goes to the sink", process: "ls /nonexistent-faas-gpu",
			method: http.MethodGet, path: "/", status: 500, want: []string{"nonexistent-faas-gpu"},
			sink: "nonexistent-faas-gpu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sink sinkRecorder
			spec := emulatedSpec(0, 0)
			spec.Process, spec.WorkDir = tc.process, t.TempDir()
			r := newClassicRunner(spec, sink.sink, zap.NewNop())
			startRunner(t, r)
			if !r.Ready() {
				t.Fatal("not ready after Start")
			}
			hdr := map[string]string{"X-Test": "yes"}
			if tc.ctype != "" {
				hdr["Content-Type"] = tc.ctype
			}
			rep := do(t, tc.method, r.URL()+tc.path, tc.body, hdr)
			if rep.status != tc.status {
				t.Fatalf("status %d, want %d; body %q", rep.status, tc.status, rep.body)
			}
			for _, w := range tc.want {
				if !strings.Contains(rep.body, w) {
					t.Errorf("body lacks %q:\n%s", w, rep.body)
				}
			}
			if tc.wantType != "" && rep.header.Get("Content-Type") != tc.wantType {
				t.Errorf("Content-Type %q, want %q", rep.header.Get("Content-Type"), tc.wantType)
			}
			if tc.sink != "" && !sink.has(tc.sink) {
				t.Errorf("sink lacks %q: %q", tc.sink, sink.lines)
			}
		})
	}
}

func TestClassicRequestEndKillsProcess(t *testing.T) {
	spec := emulatedSpec(0, 0)
	spec.Process, spec.WorkDir = "sleep 30", t.TempDir()
	r := newClassicRunner(spec, func(string, string) {}, zap.NewNop())
	startRunner(t, r)
	client := &http.Client{Timeout: 100 * time.Millisecond}
	if resp, err := client.Get(r.URL() + "/"); err == nil {
		resp.Body.Close()
		t.Fatal("sleep 30 answered")
	}
	// A graceful Stop waits for in-flight requests: it is quick only if the
	// abandoned request's process was killed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 3*time.Second {
		t.Errorf("Stop took %s: the request's process outlived it", took)
	}
}

func TestStartFailsOnMissingExecutable(t *testing.T) {
	ctors := map[string]func(ReplicaSpec, LogSink, *zap.Logger) runner{
		"classic": newClassicRunner,
		"process": newProcessRunner,
	}
	for name, ctor := range ctors {
		t.Run(name, func(t *testing.T) {
			spec := emulatedSpec(0, 0)
			spec.Process, spec.WorkDir = "no-such-fprocess-faas-gpu --flag", t.TempDir()
			r := ctor(spec, func(string, string) {}, zap.NewNop())
			err := r.Start()
			if err == nil {
				_ = r.Stop(context.Background())
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), "no-such-fprocess-faas-gpu") {
				t.Errorf("error %q does not name the executable", err)
			}
			if err := r.Stop(context.Background()); err != nil {
				t.Errorf("Stop after a failed Start: %v", err)
			}
		})
	}
}

// fastProcessRunner is a process runner with test-sized timings.
func fastProcessRunner(t *testing.T, spec ReplicaSpec, sink LogSink, log *zap.Logger) *processRunner {
	t.Helper()
	r := newProcessRunner(spec, sink, log).(*processRunner)
	r.backoffMin = 50 * time.Millisecond
	r.stopGrace = 2 * time.Second
	return r
}

func httpfnSpec(t *testing.T) ReplicaSpec {
	spec := emulatedSpec(0, 0)
	spec.Process, spec.HTTPMode, spec.WorkDir = httpfnBinary(t), true, t.TempDir()
	spec.Env = []string{"NVIDIA_VISIBLE_DEVICES=GPU-1234", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40"}
	return spec
}

func TestProcessRunner(t *testing.T) {
	var sink sinkRecorder
	r := fastProcessRunner(t, httpfnSpec(t), sink.sink, zap.NewNop())
	startRunner(t, r)
	url := r.URL()
	eventually(t, 10*time.Second, "ready", r.Ready)

	port := strings.TrimPrefix(url, "http://127.0.0.1:")
	tests := []struct {
		name, method, path, body string
		want                     string
		header                   map[string]string
	}{
		{name: "env from spec", method: "GET", path: "/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", want: "40"},
		{name: "port", method: "GET", path: "/env/port", want: port},
		{name: "PORT", method: "GET", path: "/env/PORT", want: port},
		{name: "echo", method: "POST", path: "/echo?a=b", body: "tensor",
			want: "tensor", header: map[string]string{"X-Path": "/echo", "X-Query": "a=b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := do(t, tc.method, url+tc.path, tc.body, nil)
			if rep.status != http.StatusOK || rep.body != tc.want {
				t.Errorf("%d %q, want 200 %q", rep.status, rep.body, tc.want)
			}
			for k, v := range tc.header {
				if got := rep.header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
	eventually(t, 5*time.Second, "stdout line in the sink", func() bool { return sink.has("fn-0: httpfn listening on " + port) })
	eventually(t, 5*time.Second, "stderr line in the sink", func() bool { return sink.has("httpfn POST /echo?a=b") })

	t.Run("crash restarts on the same URL", func(t *testing.T) {
		before := r.pid()
		if resp, err := http.Get(url + "/crash"); err == nil {
			resp.Body.Close()
		}
		eventually(t, 5*time.Second, "not ready after the crash", func() bool { return !r.Ready() })
		eventually(t, 10*time.Second, "ready again", r.Ready)
		if r.URL() != url {
			t.Errorf("URL changed from %s to %s", url, r.URL())
		}
		if after := r.pid(); after == before || after == 0 {
			t.Errorf("pid %d before the crash, %d after", before, after)
		}
		if rep := do(t, "GET", url+"/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "", nil); rep.body != "40" {
			t.Errorf("after restart: %q", rep.body)
		}
		if !sink.has("exit status 3") {
			t.Errorf("the crash is not in the sink: %q", sink.lines)
		}
	})

	t.Run("Stop leaves no process", func(t *testing.T) {
		pid := r.pid()
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		if r.Ready() {
			t.Error("ready after Stop")
		}
		assertGone(t, pid)
	})
}

func assertGone(t *testing.T, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("bad pid %d", pid)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d still exists after Stop (kill 0: %v)", pid, err)
	}
}

func TestProcessStopKillsAfterGrace(t *testing.T) {
	spec := httpfnSpec(t)
	spec.Env = append(spec.Env, "HTTPFN_IGNORE_TERM=1")
	r := fastProcessRunner(t, spec, func(string, string) {}, zap.NewNop())
	r.stopGrace = 200 * time.Millisecond
	startRunner(t, r)
	eventually(t, 10*time.Second, "ready", r.Ready)
	pid := r.pid()
	began := time.Now()
	if err := r.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < r.stopGrace || took > 3*time.Second {
		t.Errorf("Stop took %s with a %s grace", took, r.stopGrace)
	}
	assertGone(t, pid)
}

func TestProcessBackoffAndNotReadyWarning(t *testing.T) {
	tests := []struct {
		name       string
		process    string
		wait       time.Duration
		minStarts  int64
		maxStarts  int64
		wantWarned bool
	}{
		// 50, 100, 200, 400 ms: about 5 starts in 800 ms, not dozens.
		{name: "crash loop backs off", process: "false", wait: 800 * time.Millisecond,
			minStarts: 3, maxStarts: 7},
		{name: "never listening is not ready, warned once", process: "sleep 30",
			wait: 400 * time.Millisecond, minStarts: 1, maxStarts: 1, wantWarned: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			spec := emulatedSpec(0, 0)
			spec.Process, spec.HTTPMode, spec.WorkDir = tc.process, true, t.TempDir()
			r := fastProcessRunner(t, spec, func(string, string) {}, zap.New(core))
			r.readyWarnAfter = 100 * time.Millisecond
			startRunner(t, r)
			deadline := time.Now().Add(tc.wait)
			for time.Now().Before(deadline) {
				if r.Ready() {
					t.Fatal("ready without an HTTP server")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := r.starts.Load(); n < tc.minStarts || n > tc.maxStarts {
				t.Errorf("%d starts in %s, want %d..%d", n, tc.wait, tc.minStarts, tc.maxStarts)
			}
			warned := logs.FilterMessage("replica not ready").Len()
			if tc.wantWarned && warned != 1 {
				t.Errorf("%d not-ready warnings, want 1", warned)
			}
			pid := r.pid()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if pid != 0 {
				assertGone(t, pid)
			}
			if tc.process == "false" && logs.FilterMessage("replica exited, restarting").Len() == 0 {
				t.Error("no exit logged")
			}
		})
	}
}

func TestProcessProbe(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select { // "/" is the function itself, busy for longer than a probe waits
		case <-time.After(5 * time.Second):
		case <-req.Context().Done():
		}
	}))
	defer slow.Close()
	fast := httptest.NewServer(http.NotFoundHandler())
	defer fast.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	tests := []struct {
		name string
		url  string
		want bool
	}{
		{"any answer, even 404", fast.URL, true},
		{"accepted but slow", slow.URL, true},
		{"nothing listening", closed.URL, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newProcessRunner(ReplicaSpec{ID: "probe"}, nil, zap.NewNop()).(*processRunner)
			r.probeTimeout = 100 * time.Millisecond
			r.url = tc.url
			r.client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			if got := r.probe(context.Background()); got != tc.want {
				t.Errorf("probe = %v, want %v", got, tc.want)
			}
		})
	}
}

// A replica whose readiness path says why it is not ready (a model too
// big for its memory limit) has that reason for its function's status,
// and none once it is ready.
func TestProcessSaysWhyItIsNotReady(t *testing.T) {
	spec := httpfnSpec(t)
	spec.Env = append(spec.Env, "HTTPFN_UNREADY=model resnet50 needs 2.1 GiB; the limit is 1 GiB")
	r := fastProcessRunner(t, spec, func(string, string) {}, zap.NewNop())
	r.probePath, r.probeStrict = "/_/health", true
	startRunner(t, r)
	eventually(t, 10*time.Second, "the reason", func() bool { return r.Unready() != "" })
	if r.Ready() {
		t.Fatal("ready while /_/health answers 503")
	}
	if got := r.Unready(); !strings.Contains(got, "503") || !strings.Contains(got, "needs 2.1 GiB; the limit is 1 GiB") {
		t.Fatalf("Unready() = %q, want the status and the replica's words", got)
	}
	ok := fastProcessRunner(t, httpfnSpec(t), func(string, string) {}, zap.NewNop())
	ok.probePath, ok.probeStrict = "/_/health", true
	startRunner(t, ok)
	eventually(t, 10*time.Second, "ready", ok.Ready)
	if got := ok.Unready(); got != "" {
		t.Fatalf("a ready replica says %q", got)
	}
}
