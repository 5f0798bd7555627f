package gpu

import "fmt"

// SourceNVML is NodeGPUs.Source and Inventory.Source for GPUs found
// through NVML.
const SourceNVML = "nvml"

// Compute modes as nvidia-smi names them, in AgentGPU.ComputeMode.
// Exclusive_Process is what NVIDIA recommends beside MPS: only the MPS
// server then holds a context, so no process can bypass the SM limits.
const (
	ComputeModeDefault          = "Default"
	ComputeModeExclusiveThread  = "Exclusive_Thread"
	ComputeModeProhibited       = "Prohibited"
	ComputeModeExclusiveProcess = "Exclusive_Process"
)

// InventoryFromNodeGPUs is one node's inventory from what its agent
// reports, for GPUs that exist on this machine (Emulated false). It goes
// through the annotation's encoding and DecodeNodeGPUs on purpose: local
// mode then sees a node's GPUs exactly as the Kubernetes backend reads
// them from the Node (MIG-enabled GPUs left out, unknown SM counts taken
// from the product table).
func InventoryFromNodeGPUs(node string, n NodeGPUs) (Inventory, error) {
	value, err := EncodeNodeGPUs(n)
	if err != nil {
		return Inventory{}, err
	}
	devs, err := DecodeNodeGPUs(node, value)
	if err != nil {
		return Inventory{}, err
	}
	for _, d := range devs {
		if d.SMCount <= 0 {
			return Inventory{}, fmt.Errorf("GPU %d (%s, %q): SM count unknown: the driver does not report it and the product is not in gpu.SMCountOf's table; describe the GPUs in an -inventory file", d.Index, d.UUID, d.Product)
		}
	}
	source := n.Source
	if source == "" {
		source = SourceNVML
	}
	inv := Inventory{Nodes: []Node{{Name: node, GPUs: devs}}, Source: source}
	if err := inv.Validate(); err != nil {
		return Inventory{}, fmt.Errorf("discovered GPUs: %w", err)
	}
	return inv, nil
}
