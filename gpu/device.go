// Package gpu models the GPUs faas-gpu schedules onto and discovers them:
// from an inventory file, from the built-in emulated server, and (later)
// from NVML or Kubernetes Node annotations.
package gpu

import (
	"fmt"
	"sort"
)

// Device is one physical GPU on one node.
type Device struct {
	UUID        string `json:"uuid"`
	Node        string `json:"node"`
	Index       int    `json:"index"`
	Product     string `json:"product"`
	MemoryBytes int64  `json:"memoryBytes"`
	SMCount     int    `json:"smCount"`
}

// Node is a machine holding GPUs.
type Node struct {
	Name string   `json:"name"`
	GPUs []Device `json:"gpus"`
	// CPUCores is the node's physical CPU cores, which its replicas'
	// host work (framework dispatch, kernel launches) shares; 0: unknown
	// (readers take DefaultCPUCores).
	CPUCores int `json:"cpuCores,omitempty"`
}

// Inventory is every GPU the provider may place replicas on.
type Inventory struct {
	Nodes []Node `json:"nodes"`
	// Source says where the inventory came from (a file path, "built-in",
	// "nvml"), for logs and /system/gpus.
	Source string `json:"source"`
	// Emulated is true when the GPUs do not exist on this machine and
	// replicas that need one are emulated.
	Emulated bool `json:"emulated"`
}

// Devices lists every GPU, ordered by node name then index, so iteration
// over an inventory is deterministic.
func (inv Inventory) Devices() []Device {
	var out []Device
	for _, n := range inv.Nodes {
		out = append(out, n.GPUs...)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Index < out[j].Index
	})
	return out
}

// Validate checks that UUIDs are unique and every device is usable.
func (inv Inventory) Validate() error {
	seen := map[string]bool{}
	nodes := map[string]bool{}
	for _, n := range inv.Nodes {
		if n.Name == "" {
			return fmt.Errorf("node without a name")
		}
		if nodes[n.Name] {
			return fmt.Errorf("node %q listed twice", n.Name)
		}
		nodes[n.Name] = true
		for i, d := range n.GPUs {
			switch {
			case d.UUID == "":
				return fmt.Errorf("node %q gpu %d: uuid is empty", n.Name, i)
			case seen[d.UUID]:
				return fmt.Errorf("node %q gpu %d: uuid %q listed twice", n.Name, i, d.UUID)
			case d.MemoryBytes <= 0:
				return fmt.Errorf("node %q gpu %q: memory must be positive", n.Name, d.UUID)
			case d.SMCount <= 0:
				return fmt.Errorf("node %q gpu %q: smCount must be positive", n.Name, d.UUID)
			case d.Node != n.Name:
				return fmt.Errorf("node %q gpu %q: belongs to node %q", n.Name, d.UUID, d.Node)
			}
			seen[d.UUID] = true
		}
	}
	return nil
}

// LargestMemory is the memory of the biggest GPU, used to reject requests
// that could never fit anywhere.
func (inv Inventory) LargestMemory() int64 {
	var m int64
	for _, d := range inv.Devices() {
		m = max(m, d.MemoryBytes)
	}
	return m
}

// MainProduct is the product most of the inventory's GPUs are (ties to
// the name sorting first): profiles and slice decisions are made for it.
func (inv Inventory) MainProduct() string {
	count := map[string]int{}
	best := ""
	for _, d := range inv.Devices() {
		count[d.Product]++
		if best == "" || count[d.Product] > count[best] || count[d.Product] == count[best] && d.Product < best {
			best = d.Product
		}
	}
	return best
}

// MaxGPUsPerNode is the largest number of GPUs on one node.
func (inv Inventory) MaxGPUsPerNode() int {
	m := 0
	for _, n := range inv.Nodes {
		m = max(m, len(n.GPUs))
	}
	return m
}

// Slice is the share of one GPU given to one replica: the MPS active-thread
// percentage and the pinned device memory limit.
type Slice struct {
	SMPercent   int   `json:"smPercent"`
	MemoryBytes int64 `json:"memoryBytes"`
}
