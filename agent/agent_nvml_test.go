//go:build cgo

package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/internal/testutil"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// mockGPU is what go-nvml's mock answers for one GPU; tests change it
// between discoveries.
type mockGPU struct {
	used         uint64
	util         nvml.Utilization
	utilRet      nvml.Return // SUCCESS unless set
	compute, mps []nvml.ProcessInfo
}

const (
	mib          = 1 << 20
	gpuMemory    = 143771 * mib
	uuid0, uuid1 = "GPU-00000000-0000-0000-0000-000000000000", "GPU-11111111-1111-1111-1111-111111111111"
)

// mockNVML is an NVML library whose GPUs are *gpus at the time of each
// call, so one discoverer sees what the test sets before each pass.
func mockNVML(gpus *[]mockGPU) nvml.Interface {
	return &mock.Interface{
		InitFunc:           func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:       func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(*gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			g := (*gpus)[i]
			return &mock.Device{
				GetUUIDFunc: func() (string, nvml.Return) { return []string{uuid0, uuid1}[i], nvml.SUCCESS },
				GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H200", nvml.SUCCESS },
				GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
					return nvml.Memory{Total: gpuMemory, Used: g.used}, nvml.SUCCESS
				},
				GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
					return nvml.DeviceAttributes{MultiprocessorCount: 132}, nvml.SUCCESS
				},
				GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, nvml.SUCCESS },
				GetMigModeFunc:     func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED },
				GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
					return g.compute, nvml.SUCCESS
				},
				GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
					return g.mps, nvml.SUCCESS
				},
				GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
					if g.utilRet != 0 {
						return nvml.Utilization{}, g.utilRet
					}
					return g.util, nvml.SUCCESS
				},
			}, nvml.SUCCESS
		},
	}
}

// gpuSeries gathers reg's per-GPU and per-process series as
// "name{label=value,...}" -> value, labels sorted by name as Gather gives
// them.
func gpuSeries(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasPrefix(name, "faas_gpu_agent_gpu_") && !strings.HasPrefix(name, "faas_gpu_agent_process_") {
			continue
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = m.GetGauge().GetValue()
		}
	}
	return out
}

// What NVML reads ends up in /metrics with the right values, a process
// gone takes its series with it, and utilisation, which changes on every
// read, never causes a Node patch.
func TestAgentExportsNVMLReadings(t *testing.T) {
	const (
		g0 = "index=0,product=NVIDIA H200,uuid=" + uuid0
		g1 = "index=1,product=NVIDIA H200,uuid=" + uuid1
	)
	proc := func(uuid string, pid int, kind string) string {
		return "faas_gpu_agent_process_gpu_memory_used_bytes{kind=" + kind + ",pid=" + strconv.Itoa(pid) + ",uuid=" + uuid + "}"
	}
	busyIdle := func() []mockGPU {
		return []mockGPU{
			{ // the MPS server and two replicas (MPS clients)
				used:    5150 * mib,
				util:    nvml.Utilization{Gpu: 37, Memory: 12},
				compute: []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 30 * mib}},
				mps:     []nvml.ProcessInfo{{Pid: 201, UsedGpuMemory: 2048 * mib}, {Pid: 202, UsedGpuMemory: 3072 * mib}},
			},
			{}, // idle: 0 %, no process
		}
	}
	// The series every step shares; steps add and remove from it.
	base := map[string]float64{
		"faas_gpu_agent_gpu_memory_used_bytes{" + g0 + "}":                   5150 * mib,
		"faas_gpu_agent_gpu_processes{" + g0 + "}":                           3,
		"faas_gpu_agent_gpu_utilization_ratio{" + g0 + "}":                   0.37,
		"faas_gpu_agent_gpu_memory_controller_utilization_ratio{" + g0 + "}": 0.12,
		proc(uuid0, 100, "compute"):                                          30 * mib,
		proc(uuid0, 201, "mps"):                                              2048 * mib,
		proc(uuid0, 202, "mps"):                                              3072 * mib,
		"faas_gpu_agent_gpu_memory_used_bytes{" + g1 + "}":                   0,
		"faas_gpu_agent_gpu_processes{" + g1 + "}":                           0,
		"faas_gpu_agent_gpu_utilization_ratio{" + g1 + "}":                   0,
		"faas_gpu_agent_gpu_memory_controller_utilization_ratio{" + g1 + "}": 0,
	}
	with := func(m map[string]float64, set map[string]float64, drop ...string) map[string]float64 {
		out := map[string]float64{}
		for k, v := range m {
			if !slices.Contains(drop, k) {
				out[k] = v
			}
		}
		for k, v := range set {
			out[k] = v
		}
		return out
	}
	replicaGone := func(g []mockGPU) {
		g[0].used -= 3072 * mib
		g[0].mps = g[0].mps[:1]
	}
	afterGone := with(base, map[string]float64{
		"faas_gpu_agent_gpu_memory_used_bytes{" + g0 + "}": 2078 * mib,
		"faas_gpu_agent_gpu_processes{" + g0 + "}":         2,
	}, proc(uuid0, 202, "mps"))

	steps := []struct {
		name        string
		change      func(g []mockGPU)
		wantPatches int
		want        map[string]float64
	}{
		{"two GPUs, busy and idle", func([]mockGPU) {}, 1, base},
		{"only utilisation changed: no patch", func(g []mockGPU) {
			g[0].util = nvml.Utilization{Gpu: 90, Memory: 45}
			g[1].util = nvml.Utilization{Gpu: 5, Memory: 1}
		}, 1, with(base, map[string]float64{
			"faas_gpu_agent_gpu_utilization_ratio{" + g0 + "}":                   0.9,
			"faas_gpu_agent_gpu_memory_controller_utilization_ratio{" + g0 + "}": 0.45,
			"faas_gpu_agent_gpu_utilization_ratio{" + g1 + "}":                   0.05,
			"faas_gpu_agent_gpu_memory_controller_utilization_ratio{" + g1 + "}": 0.01,
		})},
		{"a replica gone: its series too", replicaGone, 2, afterGone},
		{"utilisation not supported: no series, no error, no patch", func(g []mockGPU) {
			replicaGone(g)
			g[1].utilRet = nvml.ERROR_NOT_SUPPORTED
		}, 2, with(afterGone, nil,
			"faas_gpu_agent_gpu_utilization_ratio{"+g1+"}", "faas_gpu_agent_gpu_memory_controller_utilization_ratio{"+g1+"}")},
		{"memory NVML cannot see: counted, no series", func(g []mockGPU) {
			replicaGone(g)
			g[1].used = 500 * mib
			g[1].compute = []nvml.ProcessInfo{{Pid: 300, UsedGpuMemory: ^uint64(0)}}
		}, 3, with(afterGone, map[string]float64{
			"faas_gpu_agent_gpu_processes{" + g1 + "}":         1,
			"faas_gpu_agent_gpu_memory_used_bytes{" + g1 + "}": 500 * mib,
		})},
	}

	gpus := busyIdle()
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-node-1"}})
	reg := prometheus.NewRegistry()
	a, err := New(Config{
		Source: gpu.NewNVMLFrom(mockNVML(&gpus), "gpu-node-1"), Publisher: NewAnnotationPublisher(client, "gpu-node-1"),
		Interval: time.Hour, Log: zap.NewNop(), Metrics: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, s := range steps {
		gpus = busyIdle()
		s.change(gpus)
		if err := a.pass(ctx); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := patches(client); got != s.wantPatches {
			t.Errorf("%s: %d patches, want %d", s.name, got, s.wantPatches)
		}
		got := gpuSeries(t, reg)
		for k, v := range s.want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("%s: %s = %v (present %v), want %v", s.name, k, g, ok, v)
			}
		}
		for k, v := range got {
			if _, ok := s.want[k]; !ok {
				t.Errorf("%s: unexpected series %s = %v", s.name, k, v)
			}
		}
	}
}

// A scrape while discoveries replace the snapshot sees every GPU: the old
// Reset-then-Set gauges let one land in between and see none.
func TestAgentScrapeDuringDiscovery(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Config{Source: gpu.NewNVMLFrom(mockNVML(&[]mockGPU{}), "n"), Publisher: NewAnnotationPublisher(fake.NewClientset(), "n"),
		Interval: time.Hour, Log: zap.NewNop(), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	p, err := testutil.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	stop, err := a.ServeMetrics(p, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	snapshot := func(pid uint32) gpu.NodeGPUs {
		n := gpu.NodeGPUs{Source: gpu.SourceNVML}
		for i, u := range []string{uuid0, uuid1} {
			n.GPUs = append(n.GPUs, gpu.AgentGPU{
				UUID: u, Index: i, Product: "NVIDIA H200", MemoryBytes: gpuMemory, SMCount: 132,
				Utilization: &gpu.Utilization{GPUPercent: pid % 100},
				Processes:   []gpu.GPUProcess{{PID: pid, MemoryBytes: mib, Kind: gpu.ProcessMPS}},
			})
		}
		return n
	}
	a.metrics.observe(snapshot(1))
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for pid := uint32(2); ; pid++ {
			select {
			case <-done:
				return
			default:
				a.metrics.observe(snapshot(pid))
			}
		}
	})
	defer func() { close(done); wg.Wait() }()

	for i := range 200 {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", p))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape %d: %d %v", i, resp.StatusCode, err)
		}
		for _, name := range []string{"faas_gpu_agent_gpu_memory_used_bytes{", "faas_gpu_agent_gpu_utilization_ratio{", "faas_gpu_agent_process_gpu_memory_used_bytes{"} {
			if n := strings.Count(string(body), "\n"+name); n != 2 {
				t.Fatalf("scrape %d: %d series of %s, want 2 (one per GPU):\n%s", i, n, name, body)
			}
		}
	}
}
