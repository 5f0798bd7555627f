package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/internal/testutil"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// provider is a faas-gpu serve process on the test cluster.
type provider struct {
	name string
	url  string
	cmd  *exec.Cmd
	out  *testutil.Buffer
	done chan struct{}
	http *http.Client
}

// Lease timings short enough for a test: a killed leader is replaced
// within about 2 s.
var fastLease = []string{"-k8s-lease-duration", "2s", "-k8s-renew-deadline", "1500ms", "-k8s-retry-period", "200ms"}

// startProvider runs faas-gpu with -kubeconfig and waits for its API. name
// is its identity in the Lease.
func startProvider(t *testing.T, name string, extra ...string) *provider {
	t.Helper()
	return startProviderAs(t, name, env.cluster.kubeconfig, nil, extra...)
}

// startProviderAs runs faas-gpu with a kubeconfig of its own and extra
// environment variables.
func startProviderAs(t *testing.T, name, kubeconfig string, extraEnv []string, extra ...string) *provider {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "-kubeconfig", kubeconfig, "-k8s-namespace", providerNS, "-k8s-identity", name,
		"-k8s-reservation-grace", "0s", "-k8s-resync", "5s", "-log-format", "console"}, fastLease...)
	args = append(args, extra...)
	cmd := exec.Command(env.providerBin, args...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "port", "basic_auth", "secret_mount_path", "read_timeout", "write_timeout", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "function_namespace":
			continue
		}
		cmd.Env = append(cmd.Env, kv)
	}
	cmd.Env = append(cmd.Env, "port="+strconv.Itoa(port), "write_timeout=10s", "read_timeout=10s")
	cmd.Env = append(cmd.Env, extraEnv...)
	p := &provider{name: name, url: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, out: &testutil.Buffer{}, done: make(chan struct{}),
		http: &http.Client{Timeout: 30 * time.Second}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start faas-gpu: %v", err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t, syscall.SIGTERM)
		if t.Failed() || os.Getenv("FAAS_GPU_TEST_LOGS") != "" {
			t.Logf("---- output of faas-gpu %s ----\n%s", name, tail(p.out.String(), 40<<10))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("faas-gpu exited: %s", tail(p.out.String(), 4000))
		default:
		}
		resp, err := p.http.Get(p.url + "/healthz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("faas-gpu %s did not serve: %v", name, err)
	}
	return p
}

// stop signals the provider and waits; a data race it reported fails the
// test.
func (p *provider) stop(t *testing.T, sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if strings.Contains(p.out.String(), "WARNING: DATA RACE") {
		t.Errorf("faas-gpu %s reported a data race:\n%s", p.name, tail(p.out.String(), 20<<10))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "[…]" + s[len(s)-n:]
}

// leads waits until the Lease names the provider.
func (p *provider) leads(t *testing.T, within time.Duration) {
	t.Helper()
	p.leads2(t, providerNS, "faas-gpu", within)
}

// leads2 waits until the Lease ns/name names the provider.
func (p *provider) leads2(t *testing.T, ns, name string, within time.Duration) {
	t.Helper()
	var holder string
	err := poll(within, func() bool {
		l, err := env.client.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		holder = *l.Spec.HolderIdentity
		return holder == p.name && strings.Contains(p.out.String(), "leading: placing replicas")
	})
	if err != nil {
		t.Fatalf("%s does not lead after %v (Lease holder %q)", p.name, within, holder)
	}
}

func poll(within time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) { return cond(), nil })
}

// loadFunction sends GETs to url from workers goroutines with client,
// each pausing between its requests, until the stop it returns is called;
// stop waits for them and returns how many requests were sent.
func loadFunction(client *http.Client, url string, workers int, pause time.Duration) (stop func() int64) {
	ctx, cancel := context.WithCancel(context.Background())
	var sent atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if resp, err := client.Get(url); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				sent.Add(1)
				time.Sleep(pause)
			}
		}()
	}
	return func() int64 { cancel(); wg.Wait(); return sent.Load() }
}

// call sends a JSON request and returns the status and body.
func (p *provider) call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.url+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// must checks a call's status.
func (p *provider) must(t *testing.T, want int, method, path string, body any) []byte {
	t.Helper()
	code, b := p.call(t, method, path, body)
	if code != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	return b
}

func (p *provider) deploy(t *testing.T, fd types.FunctionDeployment) {
	t.Helper()
	p.must(t, http.StatusAccepted, http.MethodPost, "/system/functions", fd)
}

func (p *provider) scale(t *testing.T, name string, n int) {
	t.Helper()
	p.must(t, http.StatusAccepted, http.MethodPost, "/system/scale-function/"+name, types.ScaleServiceRequest{ServiceName: name, Replicas: uint64(n)})
}

func (p *provider) remove(t *testing.T, name string) {
	t.Helper()
	p.must(t, http.StatusAccepted, http.MethodDelete, "/system/functions", types.DeleteFunctionRequest{FunctionName: name})
}

func (p *provider) status(t *testing.T, name string) types.FunctionStatus {
	t.Helper()
	var st types.FunctionStatus
	if err := json.Unmarshal(p.must(t, http.StatusOK, http.MethodGet, "/system/function/"+name, nil), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (p *provider) gpus(t *testing.T) scheduler.ClusterReport {
	t.Helper()
	var rep scheduler.ClusterReport
	if err := json.Unmarshal(p.must(t, http.StatusOK, http.MethodGet, "/system/gpus", nil), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// ready waits until the function has n available replicas.
func (p *provider) ready(t *testing.T, name string, n int, within time.Duration) {
	t.Helper()
	var st types.FunctionStatus
	err := poll(within, func() bool {
		st = p.status(t, name)
		return st.AvailableReplicas == uint64(n) && st.Replicas == uint64(n)
	})
	if err != nil {
		t.Fatalf("%s: %d/%d replicas available after %v, want %d", name, st.AvailableReplicas, st.Replicas, within, n)
	}
}

// fn is a GPU function of sm % and mem of memory.
func fn(name string, sm int, mem string) types.FunctionDeployment {
	ann := map[string]string{"com.openfaas.gpu.sm": strconv.Itoa(sm), "com.openfaas.gpu.memory": mem, "com.openfaas.gpu.model": "model-" + name}
	return types.FunctionDeployment{Service: name, Image: "ghcr.io/example/" + name + ":1", Annotations: &ann}
}
