package k8s

import (
	"fmt"
	"sort"
	"strings"
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
// labels because it carries real UUIDs. A GPU the device plugin gave a pod
// other than a faas-gpu placeholder (the agent's claims) is that pod's
// alone, so it is left out: replicas booked on it are placed elsewhere.
func nodeDevices(n *corev1.Node) ([]gpu.Device, error) {
	if v, ok := n.Annotations[gpu.AnnotationNodeGPUs]; ok {
		devs, err := gpu.DecodeNodeGPUs(n.Name, v)
		if err != nil {
			return nil, err
		}
		full, _ := gpu.ParseNodeGPUs(n.Name, v) // read without error just above
		claimed := map[string]bool{}
		for _, c := range full.Claims {
			for _, d := range c.Devices {
				claimed[d] = true
			}
		}
		kept := devs[:0]
		for _, d := range devs {
			if !claimed[d.UUID] {
				kept = append(kept, d)
			}
		}
		return kept, nil
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

// nodeFacts is what the agents report of their nodes beside the GPUs.
type nodeFacts struct {
	// stores: node -> the models its model store holds.
	stores map[string][]string
	// held: placeholder pod name (in the provider's namespace) -> the
	// device the device plugin gave it.
	held map[string]string
	// claimed: device -> "namespace/name" of the other pod holding it.
	claimed map[string]string
	// nodeOf: device -> the node it was reported on.
	nodeOf map[string]string
}

// nodeFactsFrom reads the agents' annotations; a node being deleted or
// whose annotation cannot be read tells nothing (inventoryFromNodes
// reports those).
func nodeFactsFrom(nodes []*corev1.Node, namespace string) nodeFacts {
	f := nodeFacts{stores: map[string][]string{}, held: map[string]string{}, claimed: map[string]string{}, nodeOf: map[string]string{}}
	for _, n := range nodes {
		v, ok := n.Annotations[gpu.AnnotationNodeGPUs]
		if !ok || n.DeletionTimestamp != nil {
			continue
		}
		a, err := gpu.ParseNodeGPUs(n.Name, v)
		if err != nil {
			continue
		}
		if len(a.Models) > 0 {
			f.stores[n.Name] = a.Models
		}
		for _, p := range a.Placeholders {
			ns, name, _ := strings.Cut(p.Pod, "/")
			if ns == namespace && len(p.Devices) > 0 {
				// A placeholder asks for one GPU; the first is the one.
				f.held[name] = p.Devices[0]
				f.nodeOf[p.Devices[0]] = n.Name
			}
		}
		for _, c := range a.Claims {
			for _, d := range c.Devices {
				f.claimed[d] = c.Pod
				f.nodeOf[d] = n.Name
			}
		}
	}
	return f
}

// placeholderDevices maps each booked GPU to the device its placeholder
// was given, where that differs from the GPU faas-gpu chose and is a GPU
// of the same node and kind (the device plugin picks any free GPU of the
// node, and the replicas must run where the placeholder holds). A device
// of another node or product is not used: mismatched names those.
func placeholderDevices(booked map[string]string, inv gpu.Inventory, f nodeFacts) (deviceOf map[string]string, mismatched []string) {
	byUUID := map[string]gpu.Device{}
	for _, d := range inv.Devices() {
		byUUID[d.UUID] = d
	}
	deviceOf = map[string]string{}
	for u := range booked {
		held, ok := f.held[reservationName(u)]
		if !ok || held == u {
			continue
		}
		want, okW := byUUID[u]
		got, okG := byUUID[held]
		if !okW || !okG || got.Node != want.Node || got.Product != want.Product || got.MemoryBytes != want.MemoryBytes {
			mismatched = append(mismatched, u)
			continue
		}
		deviceOf[u] = held
	}
	sort.Strings(mismatched)
	return deviceOf, mismatched
}

// gpuClash is a GPU faas-gpu has replicas on that the device plugin gave
// another pod.
type gpuClash struct{ GPU, Node, Pod string }

// clashes are the booked GPUs another pod holds, sorted by GPU.
func clashes(booked map[string]string, f nodeFacts) []gpuClash {
	var out []gpuClash
	for u, node := range booked {
		if pod, ok := f.claimed[u]; ok {
			out = append(out, gpuClash{GPU: u, Node: node, Pod: pod})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GPU < out[j].GPU })
	return out
}
