package k8s

import (
	"fmt"
	"sort"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	corev1 "k8s.io/api/core/v1"
)

// inventoryFromNodes is the GPU view of the cluster: each node's GPUs from
// the agent's annotation, else from GPU Feature Discovery's labels. A node
// being deleted, or NotReady for lostAfter or longer (0: never), is left
// out, so its replicas are placed elsewhere. Nodes whose GPUs cannot be
// read are left out and reported in problems.
func inventoryFromNodes(nodes []*corev1.Node, now time.Time, lostAfter time.Duration) (inv gpu.Inventory, problems []error) {
	inv = gpu.Inventory{Source: "kubernetes"}
	sorted := append([]*corev1.Node(nil), nodes...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	seen := map[string]string{}
	for _, n := range sorted {
		if n.DeletionTimestamp != nil || nodeLost(n, now, lostAfter) {
			continue
		}
		devs, err := nodeDevices(n)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if len(devs) == 0 {
			continue
		}
		var kept []gpu.Device
		for _, d := range devs {
			if d.SMCount <= 0 {
				d.SMCount = 1 // unknown product: the SM count only informs reports
			}
			if other, dup := seen[d.UUID]; dup {
				problems = append(problems, fmt.Errorf("node %s: GPU %s is also on node %s; ignored", n.Name, d.UUID, other))
				continue
			}
			seen[d.UUID] = n.Name
			kept = append(kept, d)
		}
		if len(kept) > 0 {
			inv.Nodes = append(inv.Nodes, gpu.Node{Name: n.Name, GPUs: kept})
		}
	}
	return inv, problems
}

// nodeDevices reads one node's GPUs: the agent's annotation wins over GFD
// labels because it carries real UUIDs.
func nodeDevices(n *corev1.Node) ([]gpu.Device, error) {
	if v, ok := n.Annotations[gpu.AnnotationNodeGPUs]; ok {
		return gpu.DecodeNodeGPUs(n.Name, v)
	}
	devs, ok, err := gpu.DevicesFromGFDLabels(n.Name, n.Labels)
	if !ok {
		return nil, nil
	}
	return devs, err
}

// nodeLost: the node's kubelet has not been Ready for lostAfter. A short
// blip keeps the replicas where they are; a dead node must not hold GPUs
// its replicas can never use.
func nodeLost(n *corev1.Node, now time.Time, lostAfter time.Duration) bool {
	if lostAfter <= 0 {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		return c.Status != corev1.ConditionTrue && now.Sub(c.LastTransitionTime.Time) >= lostAfter
	}
	return false // no condition yet: a node still registering
}

// sameInventory reports whether two inventories hold the same GPUs on the
// same nodes.
func sameInventory(a, b gpu.Inventory) bool {
	da, db := a.Devices(), b.Devices()
	if len(da) != len(db) {
		return false
	}
	for i := range da {
		if da[i] != db[i] {
			return false
		}
	}
	return true
}
