//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU describes one GPU as go-nvml's mock answers for it.
type fakeGPU struct {
	uuid, name  string
	total, used uint64
	sms         uint32 // 0: GetAttributes answers NOT_SUPPORTED, as old drivers do
	mode        nvml.ComputeMode
	modeRet     nvml.Return // non-SUCCESS: GetComputeMode answers it
	mig         int
	migRet      nvml.Return
	procs, mps  []nvml.ProcessInfo
	mpsRet      nvml.Return
	util        nvml.Utilization
	utilRet     nvml.Return // non-SUCCESS: GetUtilizationRates answers it
	fail        string      // the call that fails with ERROR_UNKNOWN
}

func (f fakeGPU) device() *mock.Device {
	ret := func(call string, r nvml.Return) nvml.Return {
		if f.fail == call {
			return nvml.ERROR_UNKNOWN
		}
		return r
	}
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return f.uuid, ret("GetUUID", nvml.SUCCESS) },
		GetNameFunc: func() (string, nvml.Return) { return f.name, ret("GetName", nvml.SUCCESS) },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: f.total, Used: f.used, Free: f.total - f.used}, ret("GetMemoryInfo", nvml.SUCCESS)
		},
		GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
			if f.sms == 0 {
				return nvml.DeviceAttributes{}, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.DeviceAttributes{MultiprocessorCount: f.sms}, nvml.SUCCESS
		},
		GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) { return f.mode, ret("GetComputeMode", f.modeRet) },
		GetMigModeFunc:     func() (int, int, nvml.Return) { return f.mig, f.mig, ret("GetMigMode", f.migRet) },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return f.procs, ret("GetComputeRunningProcesses", nvml.SUCCESS)
		},
		GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return f.mps, ret("GetMPSComputeRunningProcesses", f.mpsRet)
		},
		GetUtilizationRatesFunc: func() (nvml.Utilization, nvml.Return) {
			return f.util, ret("GetUtilizationRates", f.utilRet)
		},
	}
}

// fakeLib is an NVML library holding gpus; it counts Init and Shutdown so
// tests can check every Init is undone.
type fakeLib struct {
	*mock.Interface
	inits, shutdowns int
}

func newFakeLib(initRet nvml.Return, gpus ...fakeGPU) *fakeLib {
	l := &fakeLib{}
	l.Interface = &mock.Interface{
		InitFunc: func() nvml.Return {
			if initRet == nvml.SUCCESS {
				l.inits++
			}
			return initRet
		},
		ShutdownFunc:       func() nvml.Return { l.shutdowns++; return nvml.SUCCESS },
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(gpus), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(gpus) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return gpus[i].device(), nvml.SUCCESS
		},
	}
	return l
}

const (
	h200Name   = "NVIDIA H200"
	h200Memory = 143771 << 20 // MiB, as nvidia-smi shows on an H200
	gib        = 1 << 30
)

// eightH200 is a DGX-like node with something different on every GPU, so
// a field read from the wrong GPU or dropped shows.
func eightH200() ([]fakeGPU, []AgentGPU) {
	var fakes []fakeGPU
	var want []AgentGPU
	for i := range 8 {
		f := fakeGPU{
			uuid: fmt.Sprintf("GPU-8c1c6b8e-0000-0000-0000-00000000000%d", i), name: h200Name,
			total: h200Memory, used: uint64(i) * gib,
			sms:  132,
			mode: nvml.COMPUTEMODE_EXCLUSIVE_PROCESS, migRet: nvml.ERROR_NOT_SUPPORTED,
			util: nvml.Utilization{Gpu: uint32(10 * i), Memory: uint32(i)},
		}
		w := AgentGPU{
			UUID: f.uuid, Index: i, Product: h200Name, MemoryBytes: h200Memory, MemoryUsedBytes: int64(i) * gib,
			SMCount: 132, ComputeMode: ComputeModeExclusiveProcess,
			Utilization: &Utilization{GPUPercent: uint32(10 * i), MemoryPercent: uint32(i)},
		}
		switch i {
		case 1: // an old driver: no attributes, the SM count comes from the table
			f.sms = 0
			f.mode, w.ComputeMode = nvml.COMPUTEMODE_DEFAULT, ComputeModeDefault
		case 2: // MPS: the server is the compute process, the replicas are its
			// clients; a driver may list a client among the compute processes too
			f.procs = []nvml.ProcessInfo{{Pid: 100, UsedGpuMemory: 30 << 20}, {Pid: 201, UsedGpuMemory: 2 * gib}}
			f.mps = []nvml.ProcessInfo{{Pid: 201, UsedGpuMemory: 2 * gib}, {Pid: 202, UsedGpuMemory: 3 * gib}}
			w.Processes = []GPUProcess{
				{PID: 100, MemoryBytes: 30 << 20, Kind: ProcessCompute},
				{PID: 201, MemoryBytes: 2 * gib, Kind: ProcessMPS},
				{PID: 202, MemoryBytes: 3 * gib, Kind: ProcessMPS},
			}
		case 3: // memory NVML may not show (another container's process)
			f.procs = []nvml.ProcessInfo{{Pid: 300, UsedGpuMemory: ^uint64(0)}}
			w.Processes = []GPUProcess{{PID: 300, MemoryBytes: 0, Kind: ProcessCompute, MemoryUnknown: true}}
		case 4:
			f.mode, w.ComputeMode = nvml.COMPUTEMODE_PROHIBITED, ComputeModeProhibited
		case 5: // a driver without the MPS process list
			f.mpsRet = nvml.ERROR_FUNCTION_NOT_FOUND
			f.procs = []nvml.ProcessInfo{{Pid: 500, UsedGpuMemory: gib}}
			w.Processes = []GPUProcess{{PID: 500, MemoryBytes: gib, Kind: ProcessCompute}}
		case 6: // compute mode and utilisation not reported: unknown, not an error
			f.modeRet, w.ComputeMode = nvml.ERROR_NOT_SUPPORTED, ""
			f.utilRet, w.Utilization = nvml.ERROR_NOT_SUPPORTED, nil
		case 7: // a MIG-capable GPU with MIG off
			f.migRet, f.mig = nvml.SUCCESS, nvml.DEVICE_MIG_DISABLE
		}
		fakes = append(fakes, f)
		want = append(want, w)
	}
	return fakes, want
}

func TestNVMLDiscovers(t *testing.T) {
	eight, eightWant := eightH200()
	mig := []fakeGPU{eight[0], eight[1], eight[2]}
	mig[1].mig, mig[1].migRet = nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
	mig[1].utilRet = nvml.ERROR_NOT_SUPPORTED // as NVML answers for a GPU in MIG mode
	migWant := []AgentGPU{eightWant[0], eightWant[1], eightWant[2]}
	migWant[1].MIGEnabled = true
	migWant[1].Utilization = nil

	tests := []struct {
		name    string
		gpus    []fakeGPU
		want    []AgentGPU
		wantInv []string // UUIDs in Discover's inventory, in order
	}{
		{"no GPU", nil, []AgentGPU{}, nil},
		// GPU 4 is in Prohibited compute mode: reported, but it runs no
		// CUDA work, so the inventory leaves it out.
		{"eight GPUs", eight, eightWant, append(uuids(eightWant[:4]), uuids(eightWant[5:])...)},
		{"MIG enabled", mig, migWant, []string{migWant[0].UUID, migWant[2].UUID}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lib := newFakeLib(nvml.SUCCESS, tt.gpus...)
			d := NewNVMLFrom(lib, "gpu-node-1")
			got, err := d.NodeGPUs()
			if err != nil {
				t.Fatal(err)
			}
			want := NodeGPUs{Version: NodeGPUsVersion, Source: SourceNVML, GPUs: tt.want}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("NodeGPUs:\n got %+v\nwant %+v", got, want)
			}

			inv, err := d.Discover()
			if err != nil {
				t.Fatal(err)
			}
			if inv.Source != SourceNVML || inv.Emulated || len(inv.Nodes) != 1 || inv.Nodes[0].Name != "gpu-node-1" {
				t.Fatalf("inventory %+v", inv)
			}
			var gotUUIDs []string
			for _, dev := range inv.Devices() {
				gotUUIDs = append(gotUUIDs, dev.UUID)
				if dev.Node != "gpu-node-1" || dev.SMCount != 132 || dev.MemoryBytes != h200Memory || dev.Product != h200Name {
					t.Errorf("device %+v", dev)
				}
			}
			if !reflect.DeepEqual(gotUUIDs, tt.wantInv) {
				t.Fatalf("inventory GPUs %v, want %v", gotUUIDs, tt.wantInv)
			}

			// What the agent publishes, the provider reads back alike.
			value, err := EncodeNodeGPUs(got)
			if err != nil {
				t.Fatal(err)
			}
			devs, err := DecodeNodeGPUs("gpu-node-1", value)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(devs, append([]Device{}, inv.Devices()...)) {
				t.Fatalf("decoded annotation %+v, inventory %+v", devs, inv.Devices())
			}
			if lib.inits != 2 || lib.shutdowns != lib.inits {
				t.Fatalf("Init %d times, Shutdown %d times", lib.inits, lib.shutdowns)
			}
		})
	}
}

func uuids(gpus []AgentGPU) []string {
	var out []string
	for _, g := range gpus {
		out = append(out, g.UUID)
	}
	return out
}

// A query failing on one GPU fails the whole discovery, naming the GPU,
// and returns nothing that could be published.
func TestNVMLFailsMidway(t *testing.T) {
	tests := []struct {
		call string
		gpu  int
		want string
	}{
		{"GetMemoryInfo", 3, "GPU 3 (GPU-8c1c6b8e-0000-0000-0000-000000000003): memory info: ERROR_UNKNOWN"},
		{"GetUUID", 5, "GPU 5: uuid: ERROR_UNKNOWN"},
		{"GetName", 0, "GPU 0 (GPU-8c1c6b8e-0000-0000-0000-000000000000): product name"},
		{"GetComputeMode", 7, "GPU 7 (GPU-8c1c6b8e-0000-0000-0000-000000000007): compute mode"},
		{"GetMigMode", 2, "GPU 2 (GPU-8c1c6b8e-0000-0000-0000-000000000002): MIG mode"},
		{"GetComputeRunningProcesses", 6, "GPU 6 (GPU-8c1c6b8e-0000-0000-0000-000000000006): processes"},
		{"GetMPSComputeRunningProcesses", 4, "GPU 4 (GPU-8c1c6b8e-0000-0000-0000-000000000004): processes: MPS processes"},
		{"GetUtilizationRates", 1, "GPU 1 (GPU-8c1c6b8e-0000-0000-0000-000000000001): utilisation: ERROR_UNKNOWN"},
	}
	for _, tt := range tests {
		t.Run(tt.call, func(t *testing.T) {
			gpus, _ := eightH200()
			gpus[tt.gpu].fail = tt.call
			lib := newFakeLib(nvml.SUCCESS, gpus...)
			got, err := NewNVMLFrom(lib, "n").NodeGPUs()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one with %q", err, tt.want)
			}
			if !errors.Is(err, nvml.ERROR_UNKNOWN) || errors.Is(err, ErrNoDiscovery) {
				t.Fatalf("err = %v: must wrap NVML's answer and not read as 'no NVML'", err)
			}
			if !reflect.DeepEqual(got, NodeGPUs{}) {
				t.Fatalf("half a discovery returned: %+v", got)
			}
			if _, err := NewNVMLFrom(lib, "n").Discover(); err == nil {
				t.Fatal("Discover succeeded")
			}
			if lib.shutdowns != lib.inits {
				t.Fatalf("Init %d times, Shutdown %d times", lib.inits, lib.shutdowns)
			}
		})
	}
}

func TestNVMLInitFailure(t *testing.T) {
	tests := []struct {
		ret          nvml.Return
		noDiscovery  bool
		wantInString string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, true, "cannot load the NVML library libnvidia-ml.so.1"},
		{nvml.ERROR_DRIVER_NOT_LOADED, true, "kernel driver is not loaded"},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, false, "init libnvidia-ml.so.1"},
		{nvml.ERROR_NO_PERMISSION, false, "ERROR_NO_PERMISSION"},
	}
	for _, tt := range tests {
		t.Run(tt.ret.String(), func(t *testing.T) {
			lib := newFakeLib(tt.ret)
			_, err := NewNVMLFrom(lib, "n").NodeGPUs()
			if err == nil || errors.Is(err, ErrNoDiscovery) != tt.noDiscovery || !strings.Contains(err.Error(), tt.wantInString) {
				t.Fatalf("err = %v; want ErrNoDiscovery %v and %q", err, tt.noDiscovery, tt.wantInString)
			}
			if lib.shutdowns != 0 {
				t.Fatal("Shutdown after a failed Init")
			}
		})
	}
}

// The real library, really missing: go-nvml's dlopen of a path that does
// not exist must fail cleanly, with no driver needed on the test machine.
func TestNVMLMissingLibrary(t *testing.T) {
	d := NewNVML("n", "/nonexistent/libnvidia-ml.so.1")
	_, err := d.Discover()
	if !errors.Is(err, ErrNoDiscovery) || !strings.Contains(err.Error(), "/nonexistent/libnvidia-ml.so.1") {
		t.Fatalf("err = %v, want ErrNoDiscovery naming the library", err)
	}
}

// The default library: missing on machines without a driver (CI), present
// on GPU machines, where discovery must then give a usable inventory.
func TestNVMLDefaultLibrary(t *testing.T) {
	n, err := NewNVML("n", "").NodeGPUs()
	switch {
	case errors.Is(err, ErrNoDiscovery):
		t.Logf("no NVML here: %v", err)
	case err != nil:
		t.Fatalf("NVML is present but discovery failed: %v", err)
	default:
		t.Logf("NVML here: %+v", n)
		if _, err := InventoryFromNodeGPUs("n", n); err != nil {
			t.Fatal(err)
		}
	}
}

// The agent patches the Node only when the annotation's value changes, so
// what changes on every read (utilisation) must not be in it, while what
// the provider may act on (processes, their kind, memory) must.
func TestNVMLAnnotationLeavesOutUtilization(t *testing.T) {
	annotation := func(t *testing.T, gpus []fakeGPU) string {
		t.Helper()
		n, err := NewNVMLFrom(newFakeLib(nvml.SUCCESS, gpus...), "n").NodeGPUs()
		if err != nil {
			t.Fatal(err)
		}
		v, err := EncodeNodeGPUs(n)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	base, _ := eightH200()
	before := annotation(t, base)
	if strings.Contains(strings.ToLower(before), "utiliz") {
		t.Fatalf("utilisation in the annotation: %s", before)
	}
	if !strings.Contains(before, `{"pid":201,"memoryBytes":2147483648,"kind":"mps"}`) {
		t.Fatalf("the MPS client's kind is not in the annotation: %s", before)
	}

	tests := []struct {
		name        string
		change      func(gpus []fakeGPU)
		wantChanged bool
	}{
		{"utilisation changed", func(g []fakeGPU) {
			g[0].util = nvml.Utilization{Gpu: 97, Memory: 64}
			g[2].util = nvml.Utilization{}
		}, false},
		{"utilisation no longer reported", func(g []fakeGPU) { g[3].utilRet = nvml.ERROR_NOT_SUPPORTED }, false},
		{"a process gone", func(g []fakeGPU) { g[2].mps = g[2].mps[:1] }, true},
		{"a process's memory grew", func(g []fakeGPU) { g[5].procs = []nvml.ProcessInfo{{Pid: 500, UsedGpuMemory: 2 * gib}} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gpus, _ := eightH200()
			tt.change(gpus)
			if changed := annotation(t, gpus) != before; changed != tt.wantChanged {
				t.Fatalf("annotation changed: %v, want %v", changed, tt.wantChanged)
			}
		})
	}
}
