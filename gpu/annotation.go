package gpu

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// AnnotationNodeGPUs is the Node annotation where `faas-gpu agent` publishes
// the node's GPUs, as JSON of NodeGPUs.
const AnnotationNodeGPUs = "gpu.faas-gpu.dev/gpus"

// NodeGPUsVersion is the version of the annotation's format this build
// writes and reads.
const NodeGPUsVersion = "faas-gpu/v1"

// NodeGPUs is the annotation's content. Fields are only ever added, so an
// older provider reads a newer agent's annotation; a different Version
// means a change it cannot read.
type NodeGPUs struct {
	Version string `json:"version"`
	// Source says how the agent found the GPUs ("nvml").
	Source string     `json:"source"`
	GPUs   []AgentGPU `json:"gpus"`
	// Models are the models the node's model store holds (the names of
	// its entries), sorted; absent when the node has no store or the
	// agent was not given one. The provider's node tier treats them as on
	// the node for as long as the annotation says so.
	Models []string `json:"models,omitempty"`
	// Placeholders are the GPUs the kubelet's device plugin gave each
	// faas-gpu placeholder pod on the node, and Claims those it gave any
	// other pod, both from the kubelet's PodResources API; absent when the
	// agent cannot read it. Devices are the plugin's IDs (NVIDIA's plugin:
	// GPU UUIDs).
	Placeholders []PodDevices `json:"placeholders,omitempty"`
	Claims       []PodDevices `json:"claims,omitempty"`
}

// PodDevices are the GPUs one pod holds from the device plugin.
type PodDevices struct {
	// Pod is "namespace/name".
	Pod     string   `json:"pod"`
	Devices []string `json:"devices"`
}

// AgentGPU is what the agent reports of one GPU.
type AgentGPU struct {
	UUID        string `json:"uuid"`
	Index       int    `json:"index"`
	Product     string `json:"product"`
	MemoryBytes int64  `json:"memoryBytes"`
	// MemoryUsedBytes is what NVML reported in use when the agent looked.
	MemoryUsedBytes int64  `json:"memoryUsedBytes"`
	SMCount         int    `json:"smCount"`
	ComputeMode     string `json:"computeMode,omitempty"`
	MIGEnabled      bool   `json:"migEnabled,omitempty"`
	// Processes are the GPU's compute processes when the agent looked.
	Processes []GPUProcess `json:"processes,omitempty"`
	// Utilization is how busy NVML last found the GPU; nil when the GPU
	// does not say (MIG mode, some products). It is not in the
	// annotation: it changes on nearly every read, and the agent patches
	// the Node only when the annotation's value changes. The agent
	// exports it as metrics instead.
	Utilization *Utilization `json:"-"`
}

// Utilization is NVML's sample of a GPU's activity, each a percentage of
// the driver's last sample period (between 1/6 s and 1 s, by product).
type Utilization struct {
	// GPUPercent is the share of the period in which one or more kernels
	// ran. Under MPS a kernel using a few SMs counts like one using all.
	GPUPercent uint32
	// MemoryPercent is the share of the period in which device memory was
	// read or written: memory-controller busy time, not bandwidth or
	// capacity used.
	MemoryPercent uint32
}

// GPUProcess is one process using a GPU.
type GPUProcess struct {
	PID         uint32 `json:"pid"`
	MemoryBytes int64  `json:"memoryBytes"`
	// Kind is ProcessCompute or ProcessMPS.
	Kind string `json:"kind,omitempty"`
	// MemoryUnknown is true when NVML could not see the process's memory
	// (another container's process, without privileges); MemoryBytes is
	// then 0, which is what the annotation has always said.
	MemoryUnknown bool `json:"-"`
}

// The kinds of GPUProcess.
const (
	// ProcessCompute is a process with its own CUDA context; under MPS,
	// the MPS server.
	ProcessCompute = "compute"
	// ProcessMPS is an MPS client: under MPS, a function replica.
	ProcessMPS = "mps"
)

// EncodeNodeGPUs renders the annotation value.
func EncodeNodeGPUs(n NodeGPUs) (string, error) {
	n.Version = NodeGPUsVersion
	b, err := json.Marshal(n)
	if err != nil {
		return "", fmt.Errorf("encode %s: %w", AnnotationNodeGPUs, err)
	}
	return string(b), nil
}

// ParseNodeGPUs reads the whole annotation of node, checking its version.
func ParseNodeGPUs(node, value string) (NodeGPUs, error) {
	var n NodeGPUs
	if err := json.Unmarshal([]byte(value), &n); err != nil {
		return NodeGPUs{}, fmt.Errorf("node %s: annotation %s: %w", node, AnnotationNodeGPUs, err)
	}
	if n.Version != NodeGPUsVersion {
		return NodeGPUs{}, fmt.Errorf("node %s: annotation %s: version %q, this build reads %q", node, AnnotationNodeGPUs, n.Version, NodeGPUsVersion)
	}
	for _, p := range append(append([]PodDevices(nil), n.Placeholders...), n.Claims...) {
		if p.Pod == "" || !strings.Contains(p.Pod, "/") {
			return NodeGPUs{}, fmt.Errorf("node %s: annotation %s: pod %q is not namespace/name", node, AnnotationNodeGPUs, p.Pod)
		}
	}
	return n, nil
}

// DecodeNodeGPUs reads the annotation of node into devices of that node.
func DecodeNodeGPUs(node, value string) ([]Device, error) {
	n, err := ParseNodeGPUs(node, value)
	if err != nil {
		return nil, err
	}
	devs := make([]Device, 0, len(n.GPUs))
	for _, g := range n.GPUs {
		if g.MIGEnabled || g.ComputeMode == ComputeModeProhibited {
			continue // MIG partitions are not MPS-shareable whole GPUs; a prohibited GPU runs no CUDA work
		}
		if g.UUID == "" || g.MemoryBytes <= 0 {
			return nil, fmt.Errorf("node %s: annotation %s: GPU %d has no UUID or memory", node, AnnotationNodeGPUs, g.Index)
		}
		sm := g.SMCount
		if sm <= 0 {
			sm = SMCountOf(g.Product)
		}
		devs = append(devs, Device{UUID: g.UUID, Node: node, Index: g.Index, Product: g.Product, MemoryBytes: g.MemoryBytes, SMCount: sm})
	}
	return devs, nil
}

// Labels NVIDIA GPU Feature Discovery puts on GPU nodes.
const (
	LabelGFDCount   = "nvidia.com/gpu.count"
	LabelGFDProduct = "nvidia.com/gpu.product"
	LabelGFDMemory  = "nvidia.com/gpu.memory" // MiB
)

// DevicesFromGFDLabels builds a node's GPUs from GPU Feature Discovery's
// labels, for nodes where no agent runs. GFD gives no UUIDs, so they are
// made from the node name and index; replicas there get the index in
// NVIDIA_VISIBLE_DEVICES through the UUID field. ok is false when the node
// has no GFD labels.
func DevicesFromGFDLabels(node string, labels map[string]string) (devs []Device, ok bool, err error) {
	count, found := labels[LabelGFDCount]
	if !found {
		return nil, false, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 0 {
		return nil, true, fmt.Errorf("node %s: label %s=%q is not a count", node, LabelGFDCount, count)
	}
	mib, err := strconv.ParseInt(labels[LabelGFDMemory], 10, 64)
	if err != nil || mib <= 0 {
		return nil, true, fmt.Errorf("node %s: label %s=%q is not MiB", node, LabelGFDMemory, labels[LabelGFDMemory])
	}
	// GFD writes the product with dashes for spaces (label values allow no spaces).
	product := strings.ReplaceAll(labels[LabelGFDProduct], "-", " ")
	if p := productFromLabel(labels[LabelGFDProduct]); p != "" {
		product = p
	}
	for i := range n {
		devs = append(devs, Device{
			UUID: fmt.Sprintf("%s/%d", node, i), Node: node, Index: i, Product: product,
			MemoryBytes: resource.NewQuantity(mib<<20, resource.BinarySI).Value(), SMCount: SMCountOf(product),
		})
	}
	return devs, true, nil
}

// productFromLabel maps known GFD product label values back to NVML names.
func productFromLabel(v string) string {
	for _, p := range knownProducts {
		if strings.ReplaceAll(p.name, " ", "-") == v {
			return p.name
		}
	}
	return ""
}

type product struct {
	name string
	sms  int
}

// knownProducts is the SM count of GPUs NVML cannot report it for (go-nvml
// has no SM-count call on older drivers); from NVIDIA's data sheets.
var knownProducts = []product{
	{"Tesla V100-SXM2-16GB", 80}, {"Tesla V100-SXM2-32GB", 80}, {"Tesla V100-PCIE-16GB", 80}, {"Tesla V100-PCIE-32GB", 80},
	{"Tesla T4", 40}, {"NVIDIA A100-SXM4-40GB", 108}, {"NVIDIA A100-SXM4-80GB", 108}, {"NVIDIA A100-PCIE-40GB", 108},
	{"NVIDIA A100 80GB PCIe", 108}, {"NVIDIA A10", 72}, {"NVIDIA A30", 56}, {"NVIDIA L4", 58}, {"NVIDIA L40S", 142},
	{"NVIDIA H100 80GB HBM3", 132}, {"NVIDIA H100 PCIe", 114}, {"NVIDIA H200", 132}, {"NVIDIA GeForce RTX 4090", 128},
}

// SMCountOf is the SM count of a known product, 0 if unknown.
func SMCountOf(name string) int {
	for _, p := range knownProducts {
		if p.name == name {
			return p.sms
		}
	}
	return 0
}
