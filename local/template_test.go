package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestParseDockerfile(t *testing.T) {
	cases := []struct {
		name    string
		file    string
		want    dockerImage
		wantErr string
	}{
		{
			name: "last stage inherits its base stage",
			file: `FROM watchdog:1 AS watchdog
ENV ignored=1
FROM python:3 as build
ENV A=1 B="two words" \
    C=three
WORKDIR /home/app/
USER root
# a comment
FROM build AS ship
WORKDIR function
WORKDIR ..
USER app
ENV fprocess="python index.py"
ENV D $A-x
CMD ["fwatchdog"]
`,
			want: dockerImage{Env: map[string]string{"A": "1", "B": "two words", "C": "three", "fprocess": "python index.py", "D": "1-x"},
				EnvKeys: []string{"A", "B", "C", "fprocess", "D"}, WorkDir: "/home/app", User: "app", Cmd: []string{"fwatchdog"}},
		},
		{
			name: "an unrelated stage starts afresh; shell-form CMD",
			file: `FROM a AS one
ENV X=1
FROM b
CMD node index.js
`,
			want: dockerImage{Env: map[string]string{}, WorkDir: "/", Cmd: []string{"sh", "-c", "node index.js"}},
		},
		{name: "no FROM", file: "ENV A=1\n", wantErr: "no FROM"},
		{name: "bad ENV", file: "FROM a\nENV =x\n", wantErr: "line 2: ENV"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseDockerfile([]byte(c.file))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("want an error with %q, got %v", c.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.EnvKeys == nil {
				got.EnvKeys = nil
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("\nwant %+v\ngot  %+v", c.want, got)
			}
		})
	}
}

func TestParseWatchdog(t *testing.T) {
	cases := []struct {
		name    string
		env     map[string]string
		want    func(w Watchdog) bool
		wantErr string
	}{
		{"classic by default", nil, func(w Watchdog) bool { return w.Mode == "classic" && w.PrefixLogs && w.MaxInflight == 0 }, ""},
		{"http", map[string]string{"mode": "http", "upstream_url": "http://127.0.0.1:5000", "exec_timeout": "10", "max_inflight": "2", "prefix_logs": "false", "buffer_http": "true"},
			func(w Watchdog) bool {
				return w.ExecTimeout == 10*time.Second && w.MaxInflight == 2 && !w.PrefixLogs && w.BufferHTTP
			}, ""},
		{"sub-second timeout", map[string]string{"exec_timeout": "250ms"}, func(w Watchdog) bool { return w.ExecTimeout == 250*time.Millisecond }, ""},
		{"bad mode", map[string]string{"mode": "afk"}, nil, "mode"},
		{"bad timeout", map[string]string{"exec_timeout": "soon"}, nil, "exec_timeout"},
		{"bad inflight", map[string]string{"max_inflight": "x"}, nil, "max_inflight"},
		{"bad bool", map[string]string{"buffer_http": "yes please"}, nil, "buffer_http"},
		{"remote upstream", map[string]string{"mode": "http", "upstream_url": "http://example.com:80"}, nil, "upstream_url"},
		{"upstream without port", map[string]string{"mode": "http", "upstream_url": "http://127.0.0.1"}, nil, "upstream_url"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, err := parseWatchdog(c.env, "")
			if c.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), c.wantErr+":") {
					t.Fatalf("want an error naming %s, got %v", c.wantErr, err)
				}
				return
			}
			if err != nil || !c.want(w) {
				t.Fatalf("got %+v, %v", w, err)
			}
		})
	}
}

func TestBuildFolderPaths(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "index.py"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b := buildFolder{Dir: dir, Image: dockerImage{WorkDir: "/home/app"}}
	paths := map[string]string{
		"/home/app/public": filepath.Join(dir, "public"),
		"public":           filepath.Join(dir, "public"),
		"/etc/passwd":      "/etc/passwd",
		"/home/apple":      "/home/apple",
	}
	for in, want := range paths {
		if got := b.hostPath(in); got != want {
			t.Errorf("hostPath(%q): want %s, got %s", in, want, got)
		}
	}
	checks := map[string]string{
		"python index.py":       "",
		"python -u index.py":    "",
		"python3 missing.py":    "missing.py not found",
		"./handler":             "handler not found",
		"node":                  "",
		"":                      "no fprocess",
		"python -m http.server": "",
	}
	for proc, want := range checks {
		err := b.checkProcess(proc)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("checkProcess(%q): want %q, got %v", proc, want, err)
		}
	}
}

// templatesFor makes the template support of a test with its own state.
func templatesFor(t *testing.T) *Templates {
	t.Helper()
	tp, err := NewTemplates(TemplatesConfig{BuildRoot: t.TempDir(), StateDir: t.TempDir(), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return tp
}

// watchdogSpec is httpfn behind the provider's watchdog on a fixed port.
func watchdogSpec(t *testing.T, tp *Templates, port int, env map[string]string) ReplicaSpec {
	t.Helper()
	spec := httpfnSpec(t)
	all := map[string]string{"mode": "http", "upstream_url": fmt.Sprintf("http://127.0.0.1:%d", port)}
	for k, v := range env {
		all[k] = v
	}
	wd, err := parseWatchdog(all, "")
	if err != nil {
		t.Fatal(err)
	}
	wd.Templates = tp
	spec.Watchdog = &wd
	return spec
}

func startWatchdog(t *testing.T, spec ReplicaSpec, sink LogSink) *watchdogRunner {
	t.Helper()
	r := newWatchdogRunner(spec, sink, zap.NewNop())
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	return r
}

func TestWatchdogInflightAndTimeout(t *testing.T) {
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	tp := templatesFor(t)
	tp.newNetNS = func() (*netNS, error) { return nil, errors.New("not in this test") }
	r := startWatchdog(t, watchdogSpec(t, tp, port, map[string]string{"max_inflight": "1", "exec_timeout": "300ms"}), (&sinkRecorder{}).sink)
	eventually(t, 10*time.Second, "watchdog replica ready", r.Ready)

	get := func(path string) int {
		resp, err := http.Get(r.URL() + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/slow?ms=1000"); code != http.StatusGatewayTimeout {
		t.Errorf("a call past exec_timeout: want 504, got %d", code)
	}
	slow := make(chan int, 1)
	go func() { slow <- get("/slow?ms=250") }()
	eventually(t, 5*time.Second, "the first call holds the one slot", func() bool { return len(r.slots) == 1 })
	if code := get("/fast"); code != http.StatusTooManyRequests {
		t.Errorf("a call beyond max_inflight: want 429, got %d", code)
	}
	if code := <-slow; code != http.StatusOK {
		t.Errorf("the call inside the limit: want 200, got %d", code)
	}
	if code := get("/fast"); code != http.StatusOK {
		t.Errorf("a call once the slot is free: want 200, got %d", code)
	}
}

// Without network namespaces, replicas whose upstream port is fixed run one
// at a time: the next waits, saying why, and starts when the port is free.
func TestFixedPortWithoutNamespaces(t *testing.T) {
	port, err := freeLoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	tp := templatesFor(t)
	tp.newNetNS = func() (*netNS, error) { return nil, errors.New("operation not permitted") }
	first := startWatchdog(t, watchdogSpec(t, tp, port, nil), (&sinkRecorder{}).sink)
	eventually(t, 10*time.Second, "first replica ready", first.Ready)
	sink := &sinkRecorder{}
	spec := watchdogSpec(t, tp, port, nil)
	spec.ID = "fn-1"
	second := startWatchdog(t, spec, sink.sink)
	eventually(t, 5*time.Second, "the second replica says why it waits", func() bool {
		return sink.has(fmt.Sprintf("pending: upstream port %d is fixed and no network namespace can be made (operation not permitted)", port))
	})
	if second.Ready() {
		t.Fatal("the second replica is ready while the first holds its port")
	}
	// /system/gpus lists it as pending with that reason (GPUReport reads
	// Waiting).
	if why, ok := tp.Waiting("fn-1"); !ok || !strings.Contains(why, fmt.Sprintf("upstream port %d is fixed", port)) || !strings.Contains(why, "holds it") {
		t.Fatalf("Waiting(fn-1) = %q, %v; want the port and its holder", why, ok)
	}
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "second replica ready once the port is free", second.Ready)
	if why, ok := tp.Waiting("fn-1"); ok {
		t.Fatalf("still waiting once started: %q", why)
	}
}

// With namespaces, replicas on the same fixed port run side by side, and
// a stopped one leaves no namespace behind.
func TestFixedPortNamespaces(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("network namespaces need root on Linux")
	}
	tp := templatesFor(t)
	var rs []*watchdogRunner
	for i := range 3 {
		spec := watchdogSpec(t, tp, 5000, nil)
		spec.ID = fmt.Sprintf("fn-%d", i)
		rs = append(rs, startWatchdog(t, spec, (&sinkRecorder{}).sink))
	}
	inodes := map[uint64]bool{}
	for _, r := range rs {
		eventually(t, 10*time.Second, "replica ready in its namespace", r.Ready)
		resp, err := http.Get(r.URL() + "/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")
		if err != nil {
			// Seen about 1 run in 4 without -race: which namespace the
			// threads are in tells a leaked switch from something else.
			self, _ := os.Readlink("/proc/self/ns/net")
			tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
			var where []string
			for _, tk := range tasks {
				l, _ := os.Readlink(tk)
				where = append(where, l)
			}
			t.Fatalf("%v (process in %s; threads in %v)", err, self, where)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "40" {
			t.Errorf("want the replica's env through its namespace, got %q", b)
		}
		inodes[r.ns.inode()] = true
	}
	if len(inodes) != 3 {
		t.Fatalf("want 3 distinct namespaces, got %v", inodes)
	}
	for _, r := range rs {
		if err := r.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// This process holds no descriptor of them any more.
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, fd := range fds {
		l, _ := os.Readlink(fd)
		for ino := range inodes {
			if l == fmt.Sprintf("net:[%d]", ino) {
				t.Errorf("%s still holds namespace %s", fd, l)
			}
		}
	}
}

// pythonWithVenv is a python3 that can make virtual environments; under CI
// its absence fails the test.
func pythonWithVenv(t *testing.T) {
	t.Helper()
	if exec.Command("python3", "-c", "import venv, ensurepip").Run() != nil {
		msg := "python3 with venv is not installed (apt-get install python3-venv)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// Replicas that start together share one install, and a failed one leaves
// nothing that a later start could take for done.
func TestPrepareOnceAndCleanFailure(t *testing.T) {
	pythonWithVenv(t)
	tp := templatesFor(t)
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("requirements.txt", "# nothing to install\n")
	b := buildFolder{Dir: dir, Image: dockerImage{WorkDir: "/home/app"}}
	sink := &sinkRecorder{}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = tp.prepare(context.Background(), "ns", "fn", b, func(l string) { sink.sink("fn", l) })
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	sink.mu.Lock()
	venvs := 0
	for _, l := range sink.lines {
		if strings.Contains(l, "creating a virtual environment") {
			venvs++
		}
	}
	sink.mu.Unlock()
	if venvs != 1 {
		t.Fatalf("3 replicas at once: want one install, got %d", venvs)
	}

	write("requirements.txt", "./no-such-project-dir\n")
	fail := &sinkRecorder{}
	_, err := tp.prepare(context.Background(), "ns", "fn", b, func(l string) { fail.sink("fn", l) })
	if err == nil || !strings.Contains(err.Error(), "pip install -r requirements.txt") {
		t.Fatalf("want pip's failure, got %v", err)
	}
	if !fail.has("no-such-project-dir") {
		t.Errorf("pip's own message must reach the logs, got %v", fail.lines)
	}
	left, _ := filepath.Glob(filepath.Join(tp.depsDir, "ns", "fn", "pip-*"))
	if len(left) != 1 {
		t.Fatalf("want only the earlier, complete install left, got %v", left)
	}
	if _, err := os.Stat(filepath.Join(left[0], completeMark)); err != nil {
		t.Errorf("the install left is not a complete one: %v", err)
	}
}
