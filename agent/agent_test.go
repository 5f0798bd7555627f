package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Real: a library path that does not exist makes NVML's dlopen fail on
// any machine, and Discover must say why.
func TestDiscoverWithoutNVML(t *testing.T) {
	_, err := Discover(gpu.NewNVML("gpu-node-1", "/nonexistent/libnvidia-ml.so.1"))
	if err == nil || !strings.Contains(err.Error(), MsgNoNVML) || !errors.Is(err, gpu.ErrNoDiscovery) {
		t.Fatalf("err = %v; want %q", err, MsgNoNVML)
	}
}

// The client comes from k8s.RestConfig, as the provider's does, with the
// agent's own message where there is no cluster.
func TestNewClient(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	cfg := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443\n" +
		"contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, kubeconfig, env string
		want                  string // in the error; "" for a client
	}{
		{"no cluster", "", "", "not in a cluster and no -kubeconfig"},
		{"missing file", filepath.Join(dir, "nope"), "", "nope"},
		{"kubeconfig", kubeconfig, "", ""},
		{"$KUBECONFIG", "", kubeconfig, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.env)
			t.Setenv("KUBERNETES_SERVICE_HOST", "")
			c, err := NewClient(tt.kubeconfig, "faas-gpu-agent/test")
			if tt.want == "" {
				if err != nil || c == nil {
					t.Fatalf("NewClient = %v, %v", c, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one with %q", err, tt.want)
			}
		})
	}
}

func nodeGPUs(used int64) gpu.NodeGPUs {
	return gpu.NodeGPUs{Source: gpu.SourceNVML, GPUs: []gpu.AgentGPU{{
		UUID: "GPU-1", Index: 0, Product: "NVIDIA H200", MemoryBytes: 141 << 30, MemoryUsedBytes: used, SMCount: 132,
		ComputeMode: gpu.ComputeModeExclusiveProcess,
	}}}
}

func encode(t *testing.T, n gpu.NodeGPUs) string {
	t.Helper()
	v, err := gpu.EncodeNodeGPUs(n)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func patches(c *fake.Clientset) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

func TestAnnotationPublisher(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: "gpu-node-1", Annotations: map[string]string{"other": "kept"}, Labels: map[string]string{"nvidia.com/gpu.count": "1"},
	}})
	p := NewAnnotationPublisher(client, "gpu-node-1")
	ctx := context.Background()
	first, second := encode(t, nodeGPUs(0)), encode(t, nodeGPUs(1<<30))

	steps := []struct {
		name        string
		before      func()
		value       string
		wantChanged bool
		wantPatches int
	}{
		{"first publication patches", nil, first, true, 1},
		{"unchanged: no patch", nil, first, false, 1},
		{"changed: patched again", nil, second, true, 2},
		{"unchanged again", nil, second, false, 2},
		{"removed by someone: restored", func() {
			n, _ := client.CoreV1().Nodes().Get(ctx, "gpu-node-1", metav1.GetOptions{})
			delete(n.Annotations, gpu.AnnotationNodeGPUs)
			if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, second, true, 3},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before()
		}
		changed, err := p.Publish(ctx, s.value)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if changed != s.wantChanged || patches(client) != s.wantPatches {
			t.Fatalf("%s: changed %v with %d patches; want %v with %d", s.name, changed, patches(client), s.wantChanged, s.wantPatches)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, "gpu-node-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Annotations[gpu.AnnotationNodeGPUs] != s.value || n.Annotations["other"] != "kept" || n.Labels["nvidia.com/gpu.count"] != "1" {
			t.Fatalf("%s: node metadata %v %v", s.name, n.Annotations, n.Labels)
		}
		devs, err := gpu.DecodeNodeGPUs("gpu-node-1", n.Annotations[gpu.AnnotationNodeGPUs])
		if err != nil || len(devs) != 1 || devs[0].SMCount != 132 {
			t.Fatalf("%s: provider reads %+v, %v", s.name, devs, err)
		}
	}
	for _, a := range client.Actions() {
		if pa, ok := a.(k8stesting.PatchAction); ok && pa.GetPatchType() != "application/merge-patch+json" {
			t.Fatalf("patch type %s, want a merge patch", pa.GetPatchType())
		}
	}
}

func TestAnnotationPublisherErrors(t *testing.T) {
	client := fake.NewClientset()
	p := NewAnnotationPublisher(client, "missing")
	if _, err := p.Publish(context.Background(), "{}"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("err = %v, want one naming the node", err)
	}
	client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, fmt.Errorf("nodes is forbidden")
	})
	if _, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "missing"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(context.Background(), "{}"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("err = %v, want the API server's", err)
	}
}

// seqSource answers NodeGPUs from a list, then repeats the last answer.
type seqSource struct {
	mu    sync.Mutex
	calls int
	seq   []func() (gpu.NodeGPUs, error)
}

func (s *seqSource) NodeGPUs() (gpu.NodeGPUs, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.seq[min(s.calls, len(s.seq)-1)]
	s.calls++
	return f()
}

func (s *seqSource) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func ok(n gpu.NodeGPUs) func() (gpu.NodeGPUs, error) {
	return func() (gpu.NodeGPUs, error) { return n, nil }
}

func fail(err error) func() (gpu.NodeGPUs, error) {
	return func() (gpu.NodeGPUs, error) { return gpu.NodeGPUs{}, err }
}

// The loop: a failing pass in the middle leaves the last annotation in
// place and is retried; only changes are patched; the driver vanishing
// ends the agent with the NVML message.
func TestAgentLoop(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1"}})
	src := &seqSource{seq: []func() (gpu.NodeGPUs, error){
		ok(nodeGPUs(0)),                   // pass 1: same as the first discovery: no patch
		fail(errors.New("ERROR_UNKNOWN")), // pass 2: logged, retried
		ok(nodeGPUs(2 << 30)),             // pass 3: changed: patch
		ok(nodeGPUs(2 << 30)),             // pass 4: unchanged
		fail(fmt.Errorf("%w: gone", gpu.ErrNoDiscovery)),
	}}
	reg := prometheus.NewRegistry()
	a, err := New(Config{Source: src, Publisher: NewAnnotationPublisher(client, "gpu-node-1"), Interval: time.Millisecond, Log: zap.NewNop(), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = a.Run(ctx, nodeGPUs(0))
	if err == nil || !strings.Contains(err.Error(), MsgNoNVML) {
		t.Fatalf("run = %v, want the NVML message when the driver goes away", err)
	}
	if src.count() != 5 || patches(client) != 2 {
		t.Fatalf("%d discoveries, %d patches; want 5 and 2", src.count(), patches(client))
	}
	n, _ := client.CoreV1().Nodes().Get(ctx, "gpu-node-1", metav1.GetOptions{})
	if n.Annotations[gpu.AnnotationNodeGPUs] != encode(t, nodeGPUs(2<<30)) {
		t.Fatalf("annotation %q", n.Annotations[gpu.AnnotationNodeGPUs])
	}
	a.interval = time.Minute // healthy allows three intervals since the last good pass
	if !a.healthy(time.Now()) || a.healthy(time.Now().Add(5*time.Minute)) {
		t.Fatal("healthy must follow the last good pass")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					key += "/" + l.GetValue()
				}
			}
			got[key] += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"faas_gpu_agent_annotation_patches_total": 2, "faas_gpu_agent_discoveries_total/ok": 4,
		"faas_gpu_agent_discoveries_total/error": 2, "faas_gpu_agent_gpus": 1, "faas_gpu_agent_gpu_memory_used_bytes": 2 << 30,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("metric %s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// The first publication failing (wrong node name, no RBAC) ends the agent
// with a hint, so the pod crashes visibly instead of idling.
func TestAgentFirstPublicationFails(t *testing.T) {
	a, err := New(Config{
		Source:    &seqSource{seq: []func() (gpu.NodeGPUs, error){ok(nodeGPUs(0))}},
		Publisher: NewAnnotationPublisher(fake.NewClientset(), "not-a-node"), Interval: time.Hour,
		Log: zap.NewNop(), Metrics: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background(), nodeGPUs(0))
	if err == nil || !strings.Contains(err.Error(), "not-a-node") || !strings.Contains(err.Error(), "patch nodes") {
		t.Fatalf("err = %v", err)
	}
}

func TestAgentMetricsServer(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Config{Source: &seqSource{}, Publisher: NewAnnotationPublisher(fake.NewClientset(), "n"), Interval: time.Hour, Log: zap.NewNop(), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	p, err := testutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(p)
	stop, err := a.ServeMetrics(p, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://127.0.0.1:" + port + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("healthz before any pass: %d", code)
	}
	a.lastOK.Store(time.Now().UnixNano())
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Fatalf("healthz after a pass: %d", code)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "faas_gpu_agent_gpus") {
		t.Fatalf("metrics: %d %q", code, body)
	}
}

// -once prints, on stderr, what the annotation leaves out; stdout stays
// the annotation's JSON.
func TestAgentPrintReadings(t *testing.T) {
	tests := []struct {
		name string
		gpus []gpu.AgentGPU
		want string
	}{
		{"none", nil, ""},
		{"busy and unknown", []gpu.AgentGPU{
			{
				UUID: "GPU-0", Index: 0, Product: "NVIDIA H200", MemoryUsedBytes: 5 << 30,
				Utilization: &gpu.Utilization{GPUPercent: 37, MemoryPercent: 12},
				Processes: []gpu.GPUProcess{
					{PID: 100, MemoryBytes: 30 << 20, Kind: gpu.ProcessCompute},
					{PID: 201, MemoryBytes: 2 << 30, Kind: gpu.ProcessMPS},
					{PID: 300, Kind: gpu.ProcessCompute, MemoryUnknown: true},
				},
			},
			{UUID: "GPU-1", Index: 1, Product: "NVIDIA H200"},
		}, "GPU 0 GPU-0 (NVIDIA H200): utilisation 37 %, memory controller 12 %, memory used 5120 MiB, 3 processes\n" +
			"  pid 100 compute 30 MiB\n" +
			"  pid 201 mps 2048 MiB\n" +
			"  pid 300 compute memory not visible to NVML\n" +
			"GPU 1 GPU-1 (NVIDIA H200): utilisation not reported, memory used 0 MiB, 0 processes\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := PrintReadings(&out, gpu.NodeGPUs{GPUs: tt.gpus}); err != nil {
				t.Fatal(err)
			}
			if out.String() != tt.want {
				t.Fatalf("printed\n%s\nwant\n%s", out.String(), tt.want)
			}
		})
	}
}
