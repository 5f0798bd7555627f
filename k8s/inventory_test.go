package k8s

import (
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func agentNode(t *testing.T, name string, uuids ...string) *corev1.Node {
	t.Helper()
	ng := gpu.NodeGPUs{Source: "nvml"}
	for i, u := range uuids {
		ng.GPUs = append(ng.GPUs, gpu.AgentGPU{UUID: u, Index: i, Product: "Tesla V100-SXM2-16GB", MemoryBytes: 16 << 30, SMCount: 80})
	}
	v, err := gpu.EncodeNodeGPUs(ng)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{gpu.AnnotationNodeGPUs: v}}}
}

func gfdNode(name string, count string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		gpu.LabelGFDCount: count, gpu.LabelGFDProduct: "Tesla-T4", gpu.LabelGFDMemory: "15360",
	}}}
}

func withReady(n *corev1.Node, status corev1.ConditionStatus, since time.Time) *corev1.Node {
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(since)}}
	return n
}

func TestInventoryFromNodes(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	deleting := agentNode(t, "deleting", "GPU-d")
	deleting.DeletionTimestamp = &metav1.Time{Time: now}
	both := gfdNode("both", "4")
	both.Annotations = agentNode(t, "both", "GPU-real").Annotations
	bad := agentNode(t, "bad")
	bad.Annotations[gpu.AnnotationNodeGPUs] = `{"version":"faas-gpu/v9"}`

	tests := []struct {
		name     string
		nodes    []*corev1.Node
		want     string // node:uuid,... in order
		problems int
	}{
		{"agent annotation", []*corev1.Node{agentNode(t, "b", "GPU-b0", "GPU-b1"), agentNode(t, "a", "GPU-a0")}, "a:GPU-a0 b:GPU-b0 b:GPU-b1", 0},
		{"GFD labels", []*corev1.Node{gfdNode("g", "2")}, "g:g/0 g:g/1", 0},
		{"agent wins over GFD", []*corev1.Node{both}, "both:GPU-real", 0},
		{"no GPUs", []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}}, "", 0},
		{"unreadable annotation", []*corev1.Node{bad, agentNode(t, "ok", "GPU-ok")}, "ok:GPU-ok", 1},
		{"bad GFD count", []*corev1.Node{gfdNode("g", "many")}, "", 1},
		{"being deleted", []*corev1.Node{deleting}, "", 0},
		{"NotReady a while: lost", []*corev1.Node{withReady(agentNode(t, "n", "GPU-n"), corev1.ConditionUnknown, now.Add(-2*time.Minute))}, "", 0},
		{"NotReady briefly: kept", []*corev1.Node{withReady(agentNode(t, "n", "GPU-n"), corev1.ConditionFalse, now.Add(-10*time.Second))}, "n:GPU-n", 0},
		{"Ready", []*corev1.Node{withReady(agentNode(t, "n", "GPU-n"), corev1.ConditionTrue, now.Add(-time.Hour))}, "n:GPU-n", 0},
		{"UUID on two nodes", []*corev1.Node{agentNode(t, "a", "GPU-x"), agentNode(t, "b", "GPU-x")}, "a:GPU-x", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, problems := inventoryFromNodes(tt.nodes, now, time.Minute)
			var got []string
			for _, d := range inv.Devices() {
				got = append(got, d.Node+":"+d.UUID)
			}
			if strings.Join(got, " ") != tt.want || len(problems) != tt.problems {
				t.Errorf("got %q with problems %v; want %q with %d", strings.Join(got, " "), problems, tt.want, tt.problems)
			}
		})
	}
}

func TestGFDDevicesAreNamedByIndex(t *testing.T) {
	inv, _ := inventoryFromNodes([]*corev1.Node{gfdNode("g", "2"), agentNode(t, "a", "GPU-a0")}, time.Now(), 0)
	s := testState(inv)
	for _, c := range []struct {
		gpus []string
		want string
	}{{[]string{"g/1"}, "1"}, {[]string{"g/0", "g/1"}, "0,1"}, {[]string{"GPU-a0"}, "GPU-a0"}} {
		got := strings.Join(s.visibleDevices(placement("x", c.gpus...)), ",")
		if got != c.want {
			t.Errorf("%v: NVIDIA_VISIBLE_DEVICES=%s, want %s", c.gpus, got, c.want)
		}
	}
}
