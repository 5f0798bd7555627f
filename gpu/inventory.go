package gpu

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// InventoryVersion is the only inventory file version this build reads.
const InventoryVersion = "faas-gpu/v1"

// The built-in inventory emulates one server with two V100s, the GPU of the
// measured profiles in shared/data, so a machine without GPUs still
// schedules realistically.
const (
	V100Product = "Tesla V100-SXM2-16GB"
	v100SMs     = 80
	v100Memory  = 16 << 30
)

// ErrNoDiscovery is returned by a Discoverer that cannot run on this
// machine (no NVML library, no driver).
var ErrNoDiscovery = errors.New("gpu discovery unavailable")

// Discoverer finds the GPUs of this machine. NVML implements it; the
// provider falls back to an inventory file or the built-in inventory when
// it returns ErrNoDiscovery.
type Discoverer interface {
	Discover() (Inventory, error)
}

// inventoryFile is the YAML layout documented in docs/inventory.md.
type inventoryFile struct {
	Version string     `json:"version"`
	Nodes   []fileNode `json:"nodes"`
}

type fileNode struct {
	Name     string    `json:"name"`
	GPUs     []fileGPU `json:"gpus"`
	CPUCores int       `json:"cpuCores,omitempty"`
}

// DefaultCPUCores is a node's CPU cores when its inventory does not say:
// an NVIDIA DGX-1 with Tesla V100, the server of the measured profiles'
// GPU, has two 20-core Intel Xeon E5-2698 v4 (40 cores, 80 threads; NVIDIA
// DGX-1 System Architecture white paper, WP-08437-002). Hyper-threads are
// not counted: a replica's host work is one busy thread per launch stream.
const DefaultCPUCores = 40

// Cores is n's CPU cores, DefaultCPUCores when unknown.
func (n Node) Cores() int {
	if n.CPUCores > 0 {
		return n.CPUCores
	}
	return DefaultCPUCores
}

type fileGPU struct {
	UUID    string `json:"uuid"`
	Index   *int   `json:"index,omitempty"`
	Product string `json:"product"`
	Memory  string `json:"memory"`
	SMCount int    `json:"smCount"`
}

// LoadInventoryFile reads an inventory YAML file. GPUs are emulated unless
// emulated is false: a file describes GPUs this process may not see.
func LoadInventoryFile(path string) (Inventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Inventory{}, fmt.Errorf("read inventory: %w", err)
	}
	inv, err := ParseInventory(data)
	if err != nil {
		return Inventory{}, fmt.Errorf("inventory %s: %w", path, err)
	}
	inv.Source = path
	return inv, nil
}

// ParseInventory decodes and validates inventory YAML.
func ParseInventory(data []byte) (Inventory, error) {
	var f inventoryFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return Inventory{}, fmt.Errorf("decode: %w", err)
	}
	if f.Version != InventoryVersion {
		return Inventory{}, fmt.Errorf("version: want %q, got %q", InventoryVersion, f.Version)
	}
	inv := Inventory{Emulated: true}
	for _, fn := range f.Nodes {
		if fn.CPUCores < 0 {
			return Inventory{}, fmt.Errorf("node %q: cpuCores: %d must not be negative", fn.Name, fn.CPUCores)
		}
		n := Node{Name: fn.Name, CPUCores: fn.CPUCores}
		for i, g := range fn.GPUs {
			q, err := resource.ParseQuantity(g.Memory)
			if err != nil {
				return Inventory{}, fmt.Errorf("node %q gpu %d: memory %q: %w", fn.Name, i, g.Memory, err)
			}
			idx := i
			if g.Index != nil {
				idx = *g.Index
			}
			if g.Product == "" {
				return Inventory{}, fmt.Errorf("node %q gpu %d: product is empty", fn.Name, i)
			}
			n.GPUs = append(n.GPUs, Device{
				UUID: g.UUID, Node: fn.Name, Index: idx, Product: g.Product,
				MemoryBytes: q.Value(), SMCount: g.SMCount,
			})
		}
		inv.Nodes = append(inv.Nodes, n)
	}
	if len(inv.Nodes) == 0 {
		return Inventory{}, errors.New("nodes: at least one node is needed")
	}
	if err := inv.Validate(); err != nil {
		return Inventory{}, err
	}
	return inv, nil
}

// BuiltinInventory emulates one server named node with two V100-SXM2-16GB.
// The UUIDs are fixed so placements survive a restart.
func BuiltinInventory(node string) Inventory {
	n := Node{Name: node}
	for i := range 2 {
		n.GPUs = append(n.GPUs, Device{
			UUID:        fmt.Sprintf("GPU-00000000-faa5-0000-0000-%012d", i),
			Node:        node,
			Index:       i,
			Product:     V100Product,
			MemoryBytes: v100Memory,
			SMCount:     v100SMs,
		})
	}
	return Inventory{Nodes: []Node{n}, Source: "built-in", Emulated: true}
}

// SameGPUs reports whether inv and o hold the same GPUs, device by device:
// what a change of the cluster's inventory is judged by.
func (inv Inventory) SameGPUs(o Inventory) bool {
	return slices.Equal(inv.Devices(), o.Devices())
}
