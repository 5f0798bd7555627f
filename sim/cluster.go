package sim

import (
	"fmt"
	"strings"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// V100Inventory is a cluster of n Tesla V100-SXM2-16GB (the GPU of the
// measured profiles), perNode to a node, written as an inventory file and
// read by gpu.ParseInventory so it passes the provider's own validation.
func V100Inventory(n, perNode int) (gpu.Inventory, error) {
	if n < 1 || perNode < 1 {
		return gpu.Inventory{}, fmt.Errorf("cluster: %d GPUs, %d per node: both must be at least 1", n, perNode)
	}
	var b strings.Builder
	b.WriteString("version: " + gpu.InventoryVersion + "\nnodes:\n")
	for i := 0; i < n; i++ {
		if i%perNode == 0 {
			fmt.Fprintf(&b, "- name: node-%04d\n  gpus:\n", i/perNode)
		}
		fmt.Fprintf(&b, "  - {uuid: GPU-sim-%06d, product: %q, memory: 16Gi, smCount: 80}\n", i, gpu.V100Product)
	}
	inv, err := gpu.ParseInventory([]byte(b.String()))
	if err != nil {
		return gpu.Inventory{}, fmt.Errorf("cluster: %w", err)
	}
	inv.Source = fmt.Sprintf("%d x V100, %d per node", n, perNode)
	return inv, nil
}
