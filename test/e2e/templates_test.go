package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	"github.com/openfaas/go-sdk/stack"
)

// templateTools finds what the template functions need on this machine: a
// python3 that has Debian's flask and waitress (so pip needs no registry),
// node and npm. It returns the folder of that python3, to put first on the
// provider's PATH. A missing tool skips the test, unless CI is set: then it
// fails, so CI cannot pass without running it.
func templateTools(t *testing.T) string {
	t.Helper()
	missing := func(msg string) {
		t.Helper()
		msg += " (Debian: apt-get install python3-flask python3-waitress python3-venv nodejs npm; .ci/run does)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; skipped because CI is not set")
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing(tool + " is not installed")
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		py := filepath.Join(dir, "python3")
		if _, err := os.Stat(py); err != nil {
			continue
		}
		if exec.Command(py, "-c", "import flask, waitress, venv, ensurepip").Run() == nil {
			return dir
		}
	}
	missing("no python3 on PATH has flask, waitress and venv")
	return ""
}

// templateReply is what the test functions answer.
type templateReply struct {
	Lang   string `json:"lang"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query"`
	Body   string `json:"body"`
	SM     string `json:"sm"`
	Secret string `json:"secret"`
	PID    int    `json:"pid"`
}

// netnsOf is the network namespace of a process, as /proc shows it.
func netnsOf(pid int) string {
	l, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid))
	return l
}

// netnsHolders lists the processes that are in, or hold a descriptor of,
// any of the namespaces named, and the mounts of them.
func netnsHolders(names map[string]bool) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		if l, _ := os.Readlink(p + "/ns/net"); names[l] {
			out = append(out, p+" is in "+l)
		}
		fds, _ := filepath.Glob(p + "/fd/*")
		for _, fd := range fds {
			if l, _ := os.Readlink(fd); names[l] {
				out = append(out, fd+" holds "+l)
			}
		}
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			for n := range names {
				if strings.Contains(line, n) {
					out = append(out, "mount: "+line)
				}
			}
		}
	}
	return out
}

// TestTemplates is issue 14: functions written in the OpenFaaS templates'
// layout run unchanged from their build folders, through the real gateway,
// deployed from stack.yml as faas-cli deploys.
func TestTemplates(t *testing.T) {
	top := t
	pyDir := templateTools(t)
	gatewayBin.get(t)
	folder := filepath.Join(repoRoot, "local", "testdata", "templates")
	c := newCreds(t)
	// Started in the folder that holds build/, as a user starts it after
	// faas-cli build --shrinkwrap: no flag names the build root.
	p := startProviderWith(t, c, t.TempDir(), 0, providerOpts{Dir: folder, Env: []string{"PATH=" + pyDir + string(os.PathListSeparator) + os.Getenv("PATH")}})
	startGateway(t, p)
	gw, _ := newSDKClient(t, gatewayURL, c)
	hc := newHTTPClient(70 * time.Second)
	t.Cleanup(hc.CloseIdleConnections)
	ctx := context.Background()

	services, err := stack.ParseYAMLFile(filepath.Join(folder, "stack.yml"), "", "", true)
	if err != nil {
		t.Fatalf("parse stack.yml: %v", err)
	}
	if code, err := gw.CreateSecret(ctx, types.Secret{Name: "api-key", Value: "tmpl-s3cret"}); err != nil || code != http.StatusAccepted {
		t.Fatalf("CreateSecret through the gateway: want 202, got %d, %v", code, err)
	}
	names := []string{"classicfn", "nodefn", "pyfn"}
	sm := map[string]string{}
	for _, name := range names {
		f, ok := services.Functions[name]
		if !ok {
			t.Fatalf("stack.yml has no %s", name)
		}
		sm[name] = (*f.Annotations)["com.openfaas.gpu.sm"]
		dep := toDeployment(name, f)
		if code, _ := gw.Update(ctx, dep); code != http.StatusNotFound {
			t.Fatalf("deploy %s: first PUT want 404, got %d", name, code)
		}
		if code, err := gw.Deploy(ctx, dep); err != nil || code != http.StatusAccepted {
			t.Fatalf("deploy %s: want 202, got %d, %v", name, code, err)
		}
	}
	// npm install reaches the registry: minutes on a slow link.
	for _, name := range names {
		p.waitReady(t, defaultNS, name, 3, 4*time.Minute)
	}

	// invokeAll calls fn with bodies, sub-paths and query strings, 12 at
	// once, and returns the pids that answered.
	invokeAll := func(t *testing.T, fn string) map[int]bool {
		t.Helper()
		var mu sync.Mutex
		pids := map[int]bool{}
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				body := fmt.Sprintf("body %d of %s", i, fn)
				path := fmt.Sprintf("/function/%s/sub/path/%d?x=%d&sleep=0.3", fn, i, i)
				r, err := do(hc, http.MethodPost, gatewayURL+path, []byte(body), nil, map[string]string{"Content-Type": "text/plain"})
				if err != nil || r.Code != http.StatusOK {
					t.Errorf("POST %s: want 200, got %v %v", path, r, err)
					return
				}
				var got templateReply
				if err := json.Unmarshal(r.Body, &got); err != nil {
					t.Errorf("POST %s: not the function's JSON: %v: %s", path, err, r.Body)
					return
				}
				want := templateReply{Method: "POST", Path: fmt.Sprintf("/sub/path/%d", i), Query: fmt.Sprintf("x=%d&sleep=0.3", i),
					Body: body, SM: sm[fn], Secret: "tmpl-s3cret", Lang: got.Lang, PID: got.PID}
				if got != want {
					t.Errorf("POST %s:\nwant %+v\ngot  %+v", path, want, got)
				}
				mu.Lock()
				pids[got.PID] = true
				mu.Unlock()
			}()
		}
		wg.Wait()
		return pids
	}

	// servers are the long-running replicas of the http-mode functions, by
	// function: their pids and network namespaces.
	servers := func(t *testing.T, p *provider, fn string, want int) map[int]string {
		t.Helper()
		out := map[int]string{}
		for _, r := range p.processReplicas(fn) {
			if processAlive(r.PID) {
				out[r.PID] = netnsOf(r.PID)
			}
		}
		if len(out) != want {
			t.Fatalf("%s: want %d live server processes, got %v", fn, want, out)
		}
		return out
	}
	own := netnsOf(os.Getpid())
	allNS := map[string]bool{}
	checkServers := func(t *testing.T, p *provider) map[int]string {
		t.Helper()
		all := map[int]string{}
		seen := map[string]bool{}
		for _, fn := range []string{"pyfn", "nodefn"} {
			for pid, ns := range servers(t, p, fn, 3) {
				if ns == "" || ns == own || seen[ns] {
					t.Errorf("%s pid %d: want its own network namespace, got %q (the provider's is %s)", fn, pid, ns, own)
				}
				seen[ns], allNS[ns], all[pid] = true, true, ns
			}
		}
		return all
	}

	t.Run("three replicas each, side by side on fixed ports", func(t *testing.T) {
		checkServers(t, p)
		for _, fn := range names {
			pids := invokeAll(t, fn)
			if fn != "classicfn" && len(pids) != 3 {
				t.Errorf("%s: 12 concurrent calls of 0.3 s: want all 3 replicas to answer, got pids %v", fn, pids)
			}
		}
	})

	t.Run("logs", func(t *testing.T) {
		wants := map[string][]string{
			"pyfn":      {"build: pip install -r requirements.txt", "Requirement already satisfied: flask", "stderr: pyfn handled POST /sub/path/"},
			"nodefn":    {"build: npm install for package.json", "stderr: nodefn handled POST /sub/path/"},
			"classicfn": {"classicfn handled /sub/path/"},
		}
		for fn, want := range wants {
			var text []string
			for _, m := range getLogs(t, p, fn, 1000) {
				text = append(text, m.Text)
			}
			all := strings.Join(text, "\n")
			for _, w := range want {
				if !strings.Contains(all, w) {
					t.Errorf("logs of %s: want a line with %q, got:\n%s", fn, w, truncate(all, 4000))
				}
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		cases := []struct {
			name, process string
			env           map[string]string
			code          int
			log           string // in the function's logs
		}{
			{"nodockerfile", "python index.py", nil, http.StatusAccepted, "has no Dockerfile"},
			{"badfprocess", "", nil, http.StatusAccepted, "missing.py not found in the build folder"},
			{"badreqs", "python index.py", nil, http.StatusAccepted, "no-such-project-dir"},
			{"badinflight", "", map[string]string{"max_inflight": "lots"}, http.StatusBadRequest, ""},
			{"badtimeout", "", map[string]string{"exec_timeout": "soon"}, http.StatusBadRequest, ""},
		}
		for _, c := range cases {
			// A small slice: the GPUs are busy with the functions above.
			dep := types.FunctionDeployment{Service: c.name, Image: "example.com/" + c.name, EnvProcess: c.process, EnvVars: c.env,
				Annotations: &map[string]string{"com.openfaas.gpu.sm": "5", "com.openfaas.gpu.memory": "256Mi"}}
			r := mustDo(t, hc, http.MethodPost, gatewayURL+"/system/functions", mustJSON(t, dep), &p.Creds, nil)
			if r.Code != c.code {
				t.Errorf("deploy %s: want %d, got %s", c.name, c.code, r)
				continue
			}
			if c.code == http.StatusBadRequest {
				for k := range c.env {
					if !strings.Contains(string(r.Body), "envVars."+k) {
						t.Errorf("deploy %s: the 400 must name envVars.%s, got %s", c.name, k, r.Body)
					}
				}
				continue
			}
			eventually(t, time.Minute, c.name+"'s logs say why it does not run", func() (bool, string) {
				var text []string
				for _, m := range getLogs(t, p, c.name, 1000) {
					text = append(text, m.Text)
				}
				all := strings.Join(text, "\n")
				return strings.Contains(all, c.log), all
			})
			if err := gw.DeleteFunction(ctx, c.name, defaultNS); err != nil {
				t.Errorf("remove %s: %v", c.name, err)
			}
		}
	})

	t.Run("scale to zero and back", func(t *testing.T) {
		// Straight to the provider, as its idle scaler would: the CE gateway
		// answers a scale to zero without passing it on.
		body := []byte(`{"serviceName":"pyfn","namespace":"` + defaultNS + `","replicas":0}`)
		if r := mustDo(t, hc, http.MethodPost, p.URL+"/system/scale-function/pyfn", body, &p.Creds, nil); r.Code != http.StatusAccepted {
			t.Fatalf("scale pyfn to 0: want 202, got %s", r)
		}
		eventually(t, 30*time.Second, "pyfn has no replica in service at 0", func() (bool, string) {
			code, st := p.status(t, defaultNS, "pyfn")
			return code == http.StatusOK && st.Replicas == 0 && st.AvailableReplicas == 0, fmt.Sprintf("%d %+v", code, st)
		})
		// The gateway scales a function at zero up on its next call
		// (scale_from_zero), and holds the call until a replica is ready.
		r := mustDo(t, hc, http.MethodPost, gatewayURL+"/function/pyfn/woken?up=1", []byte("wake"), nil, nil)
		var got templateReply
		if r.Code != http.StatusOK || json.Unmarshal(r.Body, &got) != nil || got.Path != "/woken" || got.Body != "wake" {
			t.Fatalf("a call at zero: want the function's answer through the gateway, got %s", r)
		}
		p.waitReady(t, defaultNS, "pyfn", 3, time.Minute)
		if pids := invokeAll(t, "pyfn"); len(pids) != 3 {
			t.Errorf("pyfn after scaling back: want 3 replicas answering, got %v", pids)
		}
	})

	t.Run("kill -9 of the provider", func(t *testing.T) {
		before := checkServers(t, p)
		p.kill(t, syscall.SIGKILL)
		eventually(t, 20*time.Second, "replicas die with their provider", func() (bool, string) {
			var left []string
			for pid := range before {
				if processAlive(pid) {
					left = append(left, fmt.Sprint(pid))
				}
			}
			return len(left) == 0, strings.Join(left, ", ")
		})
		p = p.restart(top) // the new provider lives as long as the test, not this subtest
		for _, name := range names {
			p.waitReady(t, defaultNS, name, 3, 2*time.Minute)
		}
		checkServers(t, p)
		for _, fn := range names {
			invokeAll(t, fn)
		}
	})

	t.Run("remove leaves nothing running", func(t *testing.T) {
		live := checkServers(t, p)
		for _, name := range names {
			if err := gw.DeleteFunction(ctx, name, defaultNS); err != nil {
				t.Fatalf("remove %s: %v", name, err)
			}
		}
		eventually(t, 30*time.Second, "no process, namespace or mount of a removed function", func() (bool, string) {
			var left []string
			for pid := range live {
				if processAlive(pid) {
					left = append(left, fmt.Sprint("pid ", pid))
				}
			}
			left = append(left, netnsHolders(allNS)...)
			sort.Strings(left)
			return len(left) == 0, strings.Join(left, "; ")
		})
		requireNothingAllocated(t, p)
	})
}
