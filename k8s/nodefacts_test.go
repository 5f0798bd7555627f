package k8s

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func annotatedNode(t *testing.T, name string, n gpu.NodeGPUs) *corev1.Node {
	t.Helper()
	v, err := gpu.EncodeNodeGPUs(n)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{gpu.AnnotationNodeGPUs: v}}}
}

func twoGPUs(uuids ...string) []gpu.AgentGPU {
	var out []gpu.AgentGPU
	for i, u := range uuids {
		out = append(out, gpu.AgentGPU{UUID: u, Index: i, Product: "NVIDIA H200", MemoryBytes: 141 << 30, SMCount: 132})
	}
	return out
}

// A GPU the device plugin gave another pod is not faas-gpu's to place on;
// one its own placeholder holds stays.
func TestInventoryLeavesOutGPUsOtherPodsHold(t *testing.T) {
	n := annotatedNode(t, "n1", gpu.NodeGPUs{
		GPUs:         twoGPUs("GPU-a", "GPU-b", "GPU-c"),
		Placeholders: []gpu.PodDevices{{Pod: "openfaas/" + reservationName("GPU-a"), Devices: []string{"GPU-a"}}},
		Claims:       []gpu.PodDevices{{Pod: "ml/trainer", Devices: []string{"GPU-b"}}},
	})
	inv, problems := inventoryFromNodes([]*corev1.Node{n}, time.Now(), 0)
	var got []string
	for _, d := range inv.Devices() {
		got = append(got, d.UUID)
	}
	if len(problems) != 0 || !reflect.DeepEqual(got, []string{"GPU-a", "GPU-c"}) {
		t.Fatalf("inventory %v, problems %v; want GPU-a and GPU-c", got, problems)
	}
}

func TestNodeFacts(t *testing.T) {
	nodes := []*corev1.Node{
		annotatedNode(t, "n1", gpu.NodeGPUs{GPUs: twoGPUs("GPU-a", "GPU-b"), Models: []string{"resnet50"},
			Placeholders: []gpu.PodDevices{
				{Pod: "openfaas/" + reservationName("GPU-a"), Devices: []string{"GPU-b"}},
				{Pod: "elsewhere/" + reservationName("GPU-z"), Devices: []string{"GPU-z"}}, // another install's
			},
			Claims: []gpu.PodDevices{{Pod: "ml/trainer", Devices: []string{"GPU-a"}}}}),
		annotatedNode(t, "n2", gpu.NodeGPUs{GPUs: twoGPUs("GPU-c")}),
		{ObjectMeta: metav1.ObjectMeta{Name: "bad", Annotations: map[string]string{gpu.AnnotationNodeGPUs: "{"}}},
	}
	f := nodeFactsFrom(nodes, "openfaas")
	if !reflect.DeepEqual(f.stores, map[string][]string{"n1": {"resnet50"}}) {
		t.Errorf("stores %v", f.stores)
	}
	if !reflect.DeepEqual(f.held, map[string]string{reservationName("GPU-a"): "GPU-b"}) {
		t.Errorf("held %v", f.held)
	}
	if !reflect.DeepEqual(f.claimed, map[string]string{"GPU-a": "ml/trainer"}) {
		t.Errorf("claimed %v", f.claimed)
	}
	if got := clashes(map[string]string{"GPU-a": "n1", "GPU-c": "n2"}, f); !reflect.DeepEqual(got, []gpuClash{{GPU: "GPU-a", Node: "n1", Pod: "ml/trainer"}}) {
		t.Errorf("clashes %v", got)
	}
}

func TestPlaceholderDevices(t *testing.T) {
	inv := gpu.Inventory{Nodes: []gpu.Node{
		{Name: "n1", GPUs: []gpu.Device{
			{UUID: "GPU-a", Node: "n1", Product: "NVIDIA H200", MemoryBytes: 1 << 30, SMCount: 132},
			{UUID: "GPU-b", Node: "n1", Product: "NVIDIA H200", MemoryBytes: 1 << 30, SMCount: 132, Index: 1},
			{UUID: "GPU-t4", Node: "n1", Product: "Tesla T4", MemoryBytes: 1 << 29, SMCount: 40, Index: 2},
		}},
		{Name: "n2", GPUs: []gpu.Device{{UUID: "GPU-c", Node: "n2", Product: "NVIDIA H200", MemoryBytes: 1 << 30, SMCount: 132}}},
	}}
	held := func(pairs ...string) nodeFacts {
		f := nodeFacts{held: map[string]string{}}
		for i := 0; i < len(pairs); i += 2 {
			f.held[reservationName(pairs[i])] = pairs[i+1]
		}
		return f
	}
	tests := []struct {
		name       string
		booked     map[string]string
		facts      nodeFacts
		want       map[string]string
		mismatched []string
	}{
		{"placeholder on the GPU chosen", map[string]string{"GPU-a": "n1"}, held("GPU-a", "GPU-a"), map[string]string{}, nil},
		{"not bound yet", map[string]string{"GPU-a": "n1"}, held(), map[string]string{}, nil},
		{"plugin gave the other GPU", map[string]string{"GPU-a": "n1"}, held("GPU-a", "GPU-b"), map[string]string{"GPU-a": "GPU-b"}, nil},
		{"swapped", map[string]string{"GPU-a": "n1", "GPU-b": "n1"}, held("GPU-a", "GPU-b", "GPU-b", "GPU-a"), map[string]string{"GPU-a": "GPU-b", "GPU-b": "GPU-a"}, nil},
		{"another product", map[string]string{"GPU-a": "n1"}, held("GPU-a", "GPU-t4"), map[string]string{}, []string{"GPU-a"}},
		{"another node", map[string]string{"GPU-a": "n1"}, held("GPU-a", "GPU-c"), map[string]string{}, []string{"GPU-a"}},
		{"unknown device", map[string]string{"GPU-a": "n1"}, held("GPU-a", "GPU-gone"), map[string]string{}, []string{"GPU-a"}},
		{"placeholder of a GPU no longer booked", map[string]string{}, held("GPU-a", "GPU-b"), map[string]string{}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, mis := placeholderDevices(tt.booked, inv, tt.facts)
			if !reflect.DeepEqual(got, tt.want) || !reflect.DeepEqual(mis, tt.mismatched) {
				t.Fatalf("deviceOf %v mismatched %v; want %v and %v", got, mis, tt.want, tt.mismatched)
			}
		})
	}
}

// The agent tells placeholders by this prefix; reservationName must keep it.
func TestReservationNameHasTheAgentsPrefix(t *testing.T) {
	const agentPrefix = "faas-gpu-reserve-" // agent.ReservationPodPrefix; agent imports k8s, so not the other way
	if n := reservationName("GPU-x"); !strings.HasPrefix(n, agentPrefix) {
		t.Fatalf("%s lacks the agent's prefix %s", n, agentPrefix)
	}
}
