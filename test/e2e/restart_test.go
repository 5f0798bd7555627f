package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// load sends requests to some functions until stopped, counting answers.
type load struct {
	ok, failed atomic.Int64
	stop       chan struct{}
	wg         sync.WaitGroup

	mu       sync.Mutex
	failures []string // the first few, for the log
}

func (l *load) fail(s string) {
	l.failed.Add(1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.failures) < 10 {
		l.failures = append(l.failures, time.Now().Format("15:04:05.000")+" "+s)
	}
}

func startLoad(t *testing.T, urls []string, workers int) *load {
	l := &load{stop: make(chan struct{})}
	c := newHTTPClient(5 * time.Second)
	for i := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for n := i; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				u := urls[n%len(urls)]
				r, err := do(c, http.MethodPost, u, []byte("load"), nil, nil)
				switch {
				case err == nil && r.Code == http.StatusOK:
					l.ok.Add(1)
				case err != nil:
					l.fail(u + ": " + err.Error())
				default:
					l.fail(u + ": " + r.String())
				}
				if err != nil || r.Code != http.StatusOK {
					time.Sleep(20 * time.Millisecond) // a dead provider refuses at once
				}
			}
		}()
	}
	t.Cleanup(func() { l.halt(); c.CloseIdleConnections() })
	return l
}

func (l *load) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// waitAnswers waits until the load has had n more successful answers.
func (l *load) waitAnswers(t *testing.T, n int64, what string) {
	t.Helper()
	start := l.ok.Load()
	eventually(t, 30*time.Second, fmt.Sprintf("%d successful calls %s", n, what), func() (bool, string) {
		got := l.ok.Load() - start
		return got >= n, fmt.Sprintf("%d ok, %d failed so far", got, l.failed.Load())
	})
}

// comparable views of what must survive a restart.
type fnSnapshot struct {
	Name, Image, Namespace, EnvProcess string
	EnvVars, Labels, Annotations       map[string]string
	Secrets                            []string
	Replicas                           uint64
	CreatedAt                          time.Time
}

func snapshotFunctions(t *testing.T, p *provider) map[string]fnSnapshot {
	t.Helper()
	fns, err := p.Client.GetFunctions(context.Background(), defaultNS)
	if err != nil {
		t.Fatalf("GetFunctions: %v", err)
	}
	out := map[string]fnSnapshot{}
	for _, f := range fns {
		s := fnSnapshot{Name: f.Name, Image: f.Image, Namespace: f.Namespace, EnvProcess: f.EnvProcess,
			EnvVars: f.EnvVars, Secrets: f.Secrets, Replicas: f.Replicas, CreatedAt: f.CreatedAt.UTC()}
		if f.Labels != nil {
			s.Labels = *f.Labels
		}
		if f.Annotations != nil {
			s.Annotations = *f.Annotations
		}
		out[f.Name] = s
	}
	return out
}

func secretNames(t *testing.T, p *provider) []string {
	t.Helper()
	list, err := p.Client.GetSecrets(context.Background(), defaultNS)
	if err != nil {
		t.Fatalf("GetSecrets: %v", err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// TestRestart kills the provider with SIGKILL under load and starts it
// again on the same state dir and port: functions, secrets and placements
// come back, and the functions answer again.
func TestRestart(t *testing.T) {
	httpfn := httpfnBin.get(t)
	c := newCreds(t)
	state := t.TempDir()
	p1 := startProvider(t, c, state, 0)
	cl := p1.Client
	ctx := context.Background()

	if code, err := cl.CreateSecret(ctx, types.Secret{Name: "db-pass", Value: "survives-kill-9"}); err != nil || code != http.StatusAccepted {
		t.Fatalf("CreateSecret db-pass: %d, %v", code, err)
	}
	deps := []types.FunctionDeployment{
		{Service: "web", Image: "example.com/web:1", EnvProcess: httpfn, EnvVars: map[string]string{"mode": "http", "COLOR": "blue"},
			Secrets: []string{"db-pass"}, Labels: &map[string]string{"tier": "front"},
			Annotations: &map[string]string{"com.openfaas.gpu.sm": "40", "com.openfaas.gpu.memory": "4Gi"}},
		{Service: "emu", Image: "example.com/resnet50:1",
			Annotations: &map[string]string{"com.openfaas.gpu.sm": "20", "com.openfaas.gpu.memory": "2Gi", "com.openfaas.gpu.model": "resnet50"}},
		{Service: "classic", Image: "example.com/cat:1", EnvProcess: "cat",
			Annotations: &map[string]string{"com.openfaas.gpu.sm": "10", "com.openfaas.gpu.memory": "1Gi"}},
	}
	for _, d := range deps {
		if code, err := cl.Deploy(ctx, d); err != nil || code != http.StatusAccepted {
			t.Fatalf("Deploy %s: %d, %v", d.Service, code, err)
		}
	}
	if err := cl.ScaleFunction(ctx, "emu", defaultNS, 2); err != nil {
		t.Fatalf("ScaleFunction emu 2: %v", err)
	}
	p1.waitReady(t, defaultNS, "web", 1, 30*time.Second)
	p1.waitReady(t, defaultNS, "emu", 2, 30*time.Second)
	p1.waitReady(t, defaultNS, "classic", 1, 30*time.Second)

	fnsBefore := snapshotFunctions(t, p1)
	secretsBefore := secretNames(t, p1)
	gpusBefore := p1.gpus(t)
	placedBefore := gpusBefore.placements()
	if len(placedBefore) != 4 || len(gpusBefore.Pending) != 0 {
		t.Fatalf("before the kill: want 4 replicas placed (web, 2×emu, classic) and none pending, got %v pending %v", placedBefore, gpusBefore.Pending)
	}
	webBefore := p1.processReplicas("web")
	if len(webBefore) != 1 {
		t.Fatalf("the provider logged %d starts of web's process, want 1: %+v", len(webBefore), webBefore)
	}
	webReplica := webBefore[0]
	r := mustDo(t, p1.HTTP, http.MethodGet, p1.URL+"/function/web/env/FAAS_GPU_REPLICA", nil, nil, nil)
	if r.Code != http.StatusOK || string(r.Body) != webReplica.ID {
		t.Fatalf("web's replica: want %s, got %s", webReplica.ID, r)
	}

	base := p1.URL + "/function/"
	l := startLoad(t, []string{base + "web/echo", base + "emu", base + "classic", base + "web/slow?ms=30"}, 4)
	l.waitAnswers(t, 40, "before the kill")

	// Everything was ready before the load began: nothing may fail yet.
	if n := l.failed.Load(); n != 0 {
		l.mu.Lock()
		t.Errorf("%d calls failed before the kill: %q", n, l.failures)
		l.mu.Unlock()
	}
	p1.kill(t, syscall.SIGKILL)

	// The kernel ends the killed provider's process replicas (Pdeathsig):
	// none may outlive it and hold its port and GPU slice.
	eventually(t, 10*time.Second, fmt.Sprintf("web's process %d ends with the SIGKILLed provider", webReplica.PID), func() (bool, string) {
		return !processAlive(webReplica.PID), fmt.Sprintf("pid %d is still running: an orphaned replica", webReplica.PID)
	})

	p2 := p1.restart(t)

	if got := snapshotFunctions(t, p2); !reflect.DeepEqual(got, fnsBefore) {
		t.Errorf("functions after the restart differ:\nbefore %+v\nafter  %+v", fnsBefore, got)
	}
	if got := secretNames(t, p2); !slices.Equal(got, secretsBefore) {
		t.Errorf("secrets after the restart: want %v, got %v", secretsBefore, got)
	}
	gpusAfter := p2.gpus(t)
	if got := gpusAfter.placements(); !reflect.DeepEqual(got, placedBefore) {
		t.Errorf("placements after the restart differ:\nbefore %+v\nafter  %+v", placedBefore, got)
	}
	if len(gpusAfter.Pending) != 0 {
		t.Errorf("after the restart nothing may be pending, got %+v", gpusAfter.Pending)
	}
	if len(gpusAfter.allGPUs()) != len(gpusBefore.allGPUs()) {
		t.Fatalf("the inventory changed across the restart: %d GPUs, then %d", len(gpusBefore.allGPUs()), len(gpusAfter.allGPUs()))
	}
	for i, g := range gpusAfter.allGPUs() {
		b := gpusBefore.allGPUs()[i]
		if g.UUID != b.UUID || g.SMAllocated != b.SMAllocated || g.MemoryAllocated != b.MemoryAllocated {
			t.Errorf("GPU %d after the restart: want %s with %d%% and %d bytes booked, got %s with %d%% and %d bytes",
				i, b.UUID, b.SMAllocated, b.MemoryAllocated, g.UUID, g.SMAllocated, g.MemoryAllocated)
		}
	}

	p2.waitReady(t, defaultNS, "web", 1, 30*time.Second)
	p2.waitReady(t, defaultNS, "emu", 2, 30*time.Second)
	p2.waitReady(t, defaultNS, "classic", 1, 30*time.Second)
	l.waitAnswers(t, 40, "after the restart")
	l.halt()
	t.Logf("load: %d answers, %d failures around the kill; first failures: %q", l.ok.Load(), l.failed.Load(), l.failures)

	r = mustDo(t, p2.HTTP, http.MethodGet, p2.URL+"/function/web/env/FAAS_GPU_REPLICA", nil, nil, nil)
	if r.Code != http.StatusOK || string(r.Body) != webReplica.ID {
		t.Errorf("web after the restart: want the same replica %s, got %s", webReplica.ID, r)
	}
	r = mustDo(t, p2.HTTP, http.MethodGet, p2.URL+"/function/web/env/COLOR", nil, nil, nil)
	if r.Code != http.StatusOK || string(r.Body) != "blue" {
		t.Errorf("web's env after the restart: want COLOR=blue, got %s", r)
	}
	r = mustDo(t, p2.HTTP, http.MethodGet, p2.URL+"/function/web/env/secret_mount_path", nil, nil, nil)
	if r.Code != http.StatusOK {
		t.Fatalf("web's secret_mount_path after the restart: %s", r)
	}
	checkSecretFile(t, filepath.Join(string(r.Body), "db-pass"), "survives-kill-9")
	r = mustDo(t, p2.HTTP, http.MethodPost, p2.URL+"/function/classic", []byte("still here"), nil, nil)
	if r.Code != http.StatusOK || string(r.Body) != "still here" {
		t.Errorf("classic after the restart: want the body echoed, got %s", r)
	}
	r = mustDo(t, p2.HTTP, http.MethodPost, p2.URL+"/function/emu", nil, nil, nil)
	var id struct{ Replica, GPU string }
	if r.Code != http.StatusOK || json.Unmarshal(r.Body, &id) != nil {
		t.Errorf("emu after the restart: want 200 and its identity, got %s", r)
	} else if ps, ok := placedBefore[id.Replica]; !ok || ps[0].GPU != id.GPU {
		t.Errorf("emu after the restart answered from replica %s on GPU %s, which is not a placement from before the kill (%v)", id.Replica, id.GPU, placedBefore)
	}

	// The old process's port: free, or the new process's.
	webAfter := p2.processReplicas("web")
	if len(webAfter) == 0 {
		t.Fatalf("the restarted provider logged no start of web's process")
	}
	webNow := webAfter[len(webAfter)-1]
	if webNow.URL != webReplica.URL && answers(webReplica.URL) {
		t.Errorf("something still listens at the killed provider's replica URL %s (the new replica is at %s): an orphaned replica", webReplica.URL, webNow.URL)
	}

	// A graceful stop (SIGTERM) ends the provider cleanly, with its replicas.
	p2.kill(t, syscall.SIGTERM)
	if p2.err != nil {
		t.Errorf("faas-gpu serve after SIGTERM: want exit status 0, got %v", p2.err)
	}
	if processAlive(webNow.PID) {
		t.Errorf("web's process %d still runs after the provider stopped on SIGTERM", webNow.PID)
	}
}
