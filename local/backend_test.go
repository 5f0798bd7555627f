package local

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap/zaptest"
)

func newBackend(t *testing.T, dir string) *Backend {
	t.Helper()
	b, err := New(Config{StateDir: dir, Inventory: gpu.BuiltinInventory("node-a"), Emulation: Emulation{Latency: time.Millisecond}, Load: handlers.NewLoadBook(), Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func fnSpec(name string, sm int, mem int64) scheduler.Function {
	return scheduler.Function{
		Deployment: types.FunctionDeployment{Service: name, Image: "img", Namespace: DefaultNamespace},
		GPU:        gpu.Request{SMPercent: sm, MemoryBytes: mem, Model: name},
		Scale:      scheduler.ScalePolicy{Min: 1, Max: 20},
	}
}

func placements(t *testing.T, b *Backend) map[string]scheduler.Placement {
	t.Helper()
	return b.core.Allocator().Placements()
}

func pendingCount(t *testing.T, b *Backend) int {
	t.Helper()
	rep, err := b.GPUReport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(rep.Pending)
}

func TestPendingReplicasStartWhenCapacityFrees(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	// Each GPU holds two 40% slices: four fit, the fifth waits.
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		if err := b.Deploy(ctx, fnSpec(name, 40, 2<<30)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(placements(t, b)); got != 4 {
		t.Fatalf("placed %d, want 4", got)
	}
	if got := pendingCount(t, b); got != 1 {
		t.Fatalf("pending %d, want 1", got)
	}
	st, _ := b.Status(ctx, DefaultNamespace, "e")
	if st.Replicas != 1 || st.AvailableReplicas != 0 {
		t.Fatalf("pending function status = %d/%d, want desired 1, available 0", st.Replicas, st.AvailableReplicas)
	}
	if err := b.Delete(ctx, DefaultNamespace, "a"); err != nil {
		t.Fatal(err)
	}
	if got := pendingCount(t, b); got != 0 {
		t.Fatalf("pending %d after a delete freed room, want 0", got)
	}
	eventually(t, 5*time.Second, "e ready", func() bool {
		st, _ := b.Status(ctx, DefaultNamespace, "e")
		return st.AvailableReplicas == 1
	})
}

func TestScaleDownRemovesPendingFirst(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.Deploy(ctx, fnSpec("a", 50, 8<<30)); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 6); err != nil {
		t.Fatal(err)
	}
	placedBefore := placements(t, b)
	if len(placedBefore) != 4 || pendingCount(t, b) != 2 {
		t.Fatalf("placed %d pending %d, want 4 and 2", len(placedBefore), pendingCount(t, b))
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 4); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(placements(t, b), placedBefore) || pendingCount(t, b) != 0 {
		t.Fatal("scaling 6 -> 4 must drop the two pending replicas and keep the placed ones")
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 50); err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Status(ctx, DefaultNamespace, "a"); st.Replicas != 20 {
		t.Fatalf("replicas = %d, want the scale.max of 20", st.Replicas)
	}
}

func TestRestartRestoresFunctionsPlacementsAndSecrets(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	b := newBackend(t, dir)
	if err := b.CreateNamespace(ctx, types.FunctionNamespace{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateSecret(ctx, types.Secret{Name: "key", Namespace: DefaultNamespace, Value: "v1"}); err != nil {
		t.Fatal(err)
	}
	spec := fnSpec("echo", 25, 2<<30)
	spec.Deployment.EnvProcess = "cat"
	spec.Deployment.Secrets = []string{"key"}
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := b.Deploy(ctx, fnSpec("big", 100, 0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "big", 3); err != nil { // one fits, two wait
		t.Fatal(err)
	}
	before := placements(t, b)
	// Simulate kill -9: no Close, only the lock goes (as the kernel does).
	b.state.close()

	b2 := newBackend(t, dir)
	defer b2.Close(ctx)
	if after := placements(t, b2); !reflect.DeepEqual(after, before) {
		t.Fatalf("placements after restart:\n%v\nwant\n%v", after, before)
	}
	if pendingCount(t, b2) != 2 {
		t.Fatalf("pending after restart = %d, want 2", pendingCount(t, b2))
	}
	nss, _ := b2.Namespaces(ctx)
	if !reflect.DeepEqual(nss, []string{DefaultNamespace, "team"}) {
		t.Fatalf("namespaces = %v", nss)
	}
	secrets, _ := b2.ListSecrets(ctx, DefaultNamespace)
	if len(secrets) != 1 || secrets[0].Name != "key" {
		t.Fatalf("secrets = %v", secrets)
	}
	info, err := os.Stat(b2.state.secretPath(DefaultNamespace, "key"))
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("secret file mode = %v, %v; want 0600", info.Mode(), err)
	}
	eventually(t, 5*time.Second, "echo answers after restart", func() bool {
		eps, _ := readyEndpoints(b2, DefaultNamespace, "echo")
		if len(eps) != 1 {
			return false
		}
		resp, err := http.Post(eps[0].URL, "text/plain", strings.NewReader("ping"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body) == "ping"
	})
}

func TestSecondProviderOnSameStateDirIsRefused(t *testing.T) {
	dir := t.TempDir()
	b := newBackend(t, dir)
	defer b.Close(context.Background())
	if _, err := New(Config{StateDir: dir, Inventory: gpu.BuiltinInventory("n")}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second backend on the same state dir: %v", err)
	}
}

func TestReplicaEnvironmentCarriesPlacementAndSecrets(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.CreateSecret(ctx, types.Secret{Name: "token", Namespace: DefaultNamespace, Value: "abc"}); err != nil {
		t.Fatal(err)
	}
	spec := fnSpec("envfn", 30, 4<<30)
	spec.Deployment.EnvProcess = "env"
	spec.Deployment.EnvVars = map[string]string{"MY_VAR": "x"}
	spec.Deployment.Secrets = []string{"token"}
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var p scheduler.Placement
	for _, pl := range placements(t, b) {
		p = pl
	}
	var out string
	eventually(t, 5*time.Second, "env replica answers", func() bool {
		eps, _ := readyEndpoints(b, DefaultNamespace, "envfn")
		if len(eps) != 1 {
			return false
		}
		resp, err := http.Get(eps[0].URL)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		out = string(body)
		return resp.StatusCode == 200
	})
	for _, want := range []string{
		"NVIDIA_VISIBLE_DEVICES=" + p.GPUs[0],
		"CUDA_VISIBLE_DEVICES=" + p.GPUs[0],
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M",
		"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",
		"MY_VAR=x",
		"fprocess=env",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("replica env lacks %s", want)
		}
	}
	var secretDir string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "secret_mount_path="); ok {
			secretDir = v
		}
	}
	got, err := os.ReadFile(filepath.Join(secretDir, "token"))
	if err != nil || string(got) != "abc" {
		t.Fatalf("secret file = %q, %v", got, err)
	}
}

func TestNamespaceRules(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	spec := fnSpec("a", 10, 1<<30)
	spec.Deployment.Namespace = "team"
	var fe *gpu.FieldError
	if err := b.Deploy(ctx, spec); !errors.As(err, &fe) || fe.Field != "namespace" {
		t.Fatalf("deploy to a missing namespace: %v", err)
	}
	if err := b.CreateNamespace(ctx, types.FunctionNamespace{Name: "team"}); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateNamespace(ctx, types.FunctionNamespace{Name: "team"}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("duplicate namespace: %v", err)
	}
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteNamespace(ctx, "team"); !errors.As(err, &fe) {
		t.Fatalf("deleting a namespace with functions: %v", err)
	}
	ns, _ := b.GetNamespace(ctx, "team")
	if ns.Labels["openfaas"] != "1" {
		t.Fatalf("namespace labels = %v", ns.Labels)
	}
}

func TestUpdateRestartsReplicasWithNewSpec(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.Deploy(ctx, fnSpec("a", 60, 8<<30)); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 2); err != nil {
		t.Fatal(err)
	}
	// 60% + 60% needs both GPUs; the new 90% slice still fits because the
	// old replicas are released before the new ones are placed.
	if err := b.Update(ctx, fnSpec("a", 90, 8<<30)); err != nil {
		t.Fatal(err)
	}
	ps := placements(t, b)
	if len(ps) != 2 {
		t.Fatalf("placed %d after update, want 2", len(ps))
	}
	for _, p := range ps {
		if p.Slice.SMPercent != 90 {
			t.Fatalf("slice after update = %+v", p.Slice)
		}
	}
	if err := b.Update(ctx, fnSpec("nope", 10, 1)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("update unknown: %v", err)
	}
}

// coreView is the core's view of function k, read under the backend's lock
// as every other reader does.
func coreView(b *Backend, k string) (lifecycle.FunctionView, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.core.Function(k)
}

// request counts one request of ns/name as the proxy does.
func request(b *Backend, ns, name string) {
	requestAt(b, ns, name, time.Now())
}

// requestAt counts a request as the proxy would, arriving at at: a test
// whose ticks run on a made-up clock gives its requests that clock too,
// or the core sees them stop (an idle gap) while the load goes on.
func requestAt(b *Backend, ns, name string, at time.Time) {
	b.cfg.Load.(*handlers.LoadBook).Request(ns, name, at)
}

// readyEndpoints is what the proxy's one lookup finds of ns/name.
func readyEndpoints(b *Backend, ns, name string) ([]scheduler.Endpoint, error) {
	rt, err := b.Route(ns, name, "")
	return rt.Endpoints, err
}
