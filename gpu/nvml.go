//go:build cgo

package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// NVML discovers this machine's GPUs through NVIDIA's management library
// (libnvidia-ml.so.1, part of the driver). go-nvml opens it with dlopen at
// Init, so a binary built with it still starts on machines without a
// driver: discovery then fails with ErrNoDiscovery.
type NVML struct {
	lib     nvml.Interface
	libPath string // for messages; "" is go-nvml's default name
	node    string
}

// NewNVML discovers through the driver's NVML library; libraryPath ""
// loads libnvidia-ml.so.1 from the linker's search path, otherwise that
// file (GPU Operator installs keep the driver under /run/nvidia/driver).
// node names the GPUs' node in Discover's inventory.
func NewNVML(node, libraryPath string) *NVML {
	var opts []nvml.LibraryOption
	if libraryPath != "" {
		opts = append(opts, nvml.WithLibraryPath(libraryPath))
	}
	return &NVML{lib: nvml.New(opts...), libPath: libraryPath, node: node}
}

// NewNVMLFrom discovers through lib, which tests fill with go-nvml's mock.
func NewNVMLFrom(lib nvml.Interface, node string) *NVML {
	return &NVML{lib: lib, node: node}
}

var _ Discoverer = (*NVML)(nil)

// Discover is the local provider's view: this node's GPUs that MPS can
// share (MIG-enabled GPUs are left out), Emulated false.
func (d *NVML) Discover() (Inventory, error) {
	n, err := d.NodeGPUs()
	if err != nil {
		return Inventory{}, err
	}
	return InventoryFromNodeGPUs(d.node, n)
}

// NodeGPUs is what the agent publishes: every GPU, MIG-enabled ones too,
// with its memory in use and its processes. It is all or nothing: a query
// that fails on any GPU fails the whole discovery, so a half-read node is
// never published.
func (d *NVML) NodeGPUs() (NodeGPUs, error) {
	if ret := d.lib.Init(); ret != nvml.SUCCESS {
		return NodeGPUs{}, d.initError(ret)
	}
	// Shutdown only drops go-nvml's reference count and dlcloses the
	// library at zero; its failure changes nothing already read.
	defer d.lib.Shutdown() //nolint:errcheck

	count, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return NodeGPUs{}, fmt.Errorf("nvml: count GPUs: %w", ret)
	}
	gpus := make([]AgentGPU, 0, count)
	for i := range count {
		g, err := d.readGPU(i)
		if err != nil {
			return NodeGPUs{}, err
		}
		gpus = append(gpus, g)
	}
	return NodeGPUs{Version: NodeGPUsVersion, Source: SourceNVML, GPUs: gpus}, nil
}

// initError tells a machine without NVIDIA's driver (ErrNoDiscovery, so
// callers fall back or explain) from a driver that is there but broken
// (after a driver upgrade without a reboot, say), which callers report.
func (d *NVML) initError(ret nvml.Return) error {
	lib := d.libPath
	if lib == "" {
		lib = "libnvidia-ml.so.1"
	}
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return fmt.Errorf("%w: cannot load the NVML library %s: %w", ErrNoDiscovery, lib, ret)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: the NVML library %s is there but the NVIDIA kernel driver is not loaded: %w", ErrNoDiscovery, lib, ret)
	default:
		return fmt.Errorf("nvml: init %s: %w", lib, ret)
	}
}

// readGPU reads one GPU. Errors name the GPU by index and, once known, by
// UUID, since that is what an operator finds in nvidia-smi.
func (d *NVML) readGPU(i int) (AgentGPU, error) {
	dev, ret := d.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return AgentGPU{}, fmt.Errorf("nvml: GPU %d: handle: %w", i, ret)
	}
	uuid, ret := dev.GetUUID()
	if ret != nvml.SUCCESS {
		return AgentGPU{}, fmt.Errorf("nvml: GPU %d: uuid: %w", i, ret)
	}
	fail := func(what string, err error) error {
		return fmt.Errorf("nvml: GPU %d (%s): %s: %w", i, uuid, what, err)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return AgentGPU{}, fail("product name", ret)
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return AgentGPU{}, fail("memory info", ret)
	}
	g := AgentGPU{
		UUID: uuid, Index: i, Product: name,
		MemoryBytes: clampInt64(mem.Total), MemoryUsedBytes: clampInt64(mem.Used),
		SMCount: smCount(dev, name),
	}
	mode, ret := dev.GetComputeMode()
	switch {
	case ret == nvml.SUCCESS:
		g.ComputeMode = computeModeName(mode)
	case !optional(ret):
		return AgentGPU{}, fail("compute mode", ret)
	}
	current, _, ret := dev.GetMigMode()
	switch {
	case ret == nvml.SUCCESS:
		g.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
	case !optional(ret): // GPUs without MIG answer NOT_SUPPORTED
		return AgentGPU{}, fail("MIG mode", ret)
	}
	procs, err := processes(dev)
	if err != nil {
		return AgentGPU{}, fail("processes", err)
	}
	g.Processes = procs
	util, ret := dev.GetUtilizationRates()
	switch {
	case ret == nvml.SUCCESS:
		g.Utilization = &Utilization{GPUPercent: util.Gpu, MemoryPercent: util.Memory}
	case !optional(ret): // MIG-enabled GPUs answer NOT_SUPPORTED
		return AgentGPU{}, fail("utilisation", ret)
	}
	return g, nil
}

// smCount asks NVML for the multiprocessor count. nvmlDeviceGetAttributes
// answers for whole GPUs only on recent drivers (older ones serve MIG
// devices alone, with NOT_SUPPORTED or INVALID_ARGUMENT otherwise), so any
// failure falls back to the product table; 0 means unknown, which readers
// of the annotation resolve with the same table.
func smCount(dev nvml.Device, product string) int {
	if attrs, ret := dev.GetAttributes(); ret == nvml.SUCCESS && attrs.MultiprocessorCount > 0 {
		return int(attrs.MultiprocessorCount)
	}
	return SMCountOf(product)
}

// processes lists the GPU's compute processes with their memory. Under MPS
// the function replicas are MPS clients, which NVML lists apart from the
// MPS server (the only "compute" process then), so both lists are merged.
// A pid in the MPS list is an MPS client even if the compute list has it
// too, as some drivers do. The MPS list is optional: drivers before R470
// lack the call.
func processes(dev nvml.Device) ([]GPUProcess, error) {
	compute, ret := dev.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS && !optional(ret) {
		return nil, ret
	}
	mps, ret := dev.GetMPSComputeRunningProcesses()
	if ret != nvml.SUCCESS && !optional(ret) {
		return nil, fmt.Errorf("MPS processes: %w", ret)
	}
	client := make(map[uint32]bool, len(mps))
	for _, p := range mps {
		client[p.Pid] = true
	}
	var out []GPUProcess
	seen := map[uint32]bool{}
	for _, p := range append(compute, mps...) {
		if seen[p.Pid] {
			continue
		}
		seen[p.Pid] = true
		gp := GPUProcess{PID: p.Pid, Kind: ProcessCompute}
		if client[p.Pid] {
			gp.Kind = ProcessMPS
		}
		gp.MemoryBytes, gp.MemoryUnknown = processMemory(p.UsedGpuMemory)
		out = append(out, gp)
	}
	return out, nil
}

// processMemory maps NVML_VALUE_NOT_AVAILABLE (all bits set: NVML may not
// see a process's memory, e.g. one in another container without
// privileges) to 0 and unknown, rather than a huge or negative number.
func processMemory(v uint64) (bytes int64, unknown bool) {
	if v == ^uint64(0) {
		return 0, true
	}
	return clampInt64(v), false
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}

// optional is true for answers that mean "this GPU or driver has no such
// thing", as opposed to a failure.
func optional(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// computeModeName uses nvidia-smi's names, which operators know.
func computeModeName(m nvml.ComputeMode) string {
	switch m {
	case nvml.COMPUTEMODE_DEFAULT:
		return ComputeModeDefault
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return ComputeModeExclusiveThread
	case nvml.COMPUTEMODE_PROHIBITED:
		return ComputeModeProhibited
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return ComputeModeExclusiveProcess
	default:
		return fmt.Sprintf("Unknown(%d)", int(m))
	}
}
