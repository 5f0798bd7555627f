package k8s

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A standby keeps a pod beyond those its group serves on, one still
// starting first (labelled out of routing before it is ready), and waits
// while the group has no such pod.
func TestSpareFor(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(name string, age time.Duration, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelGroup: "g"},
			CreationTimestamp: metav1.NewTime(t0.Add(-age))}}
		if ready {
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		}
		return p
	}
	tests := []struct {
		name string
		pods []*corev1.Pod
		tied map[string]bool
		live int
		want string // "" for none
	}{
		{"no pod beyond the one in service yet", []*corev1.Pod{pod("a", time.Minute, true)}, nil, 1, ""},
		{"the new pod, still starting", []*corev1.Pod{pod("a", time.Minute, true), pod("b", time.Second, false)}, nil, 1, "b"},
		{"a starting pod before a newer ready one", []*corev1.Pod{pod("a", time.Minute, true), pod("b", 2*time.Second, false), pod("c", time.Second, true)}, nil, 1, "b"},
		{"all ready (kwok): the newest", []*corev1.Pod{pod("a", time.Minute, true), pod("b", time.Second, true)}, nil, 1, "b"},
		{"a pod tied to another warm replica is not spare", []*corev1.Pod{pod("a", time.Minute, true), pod("w", time.Second, true)}, map[string]bool{"w": true}, 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := spareFor(tt.pods, "g", tt.tied, nil, tt.live)
			name := ""
			if got != nil {
				name = got.Name
			}
			if name != tt.want {
				t.Fatalf("spareFor: %q, want %q", name, tt.want)
			}
		})
	}
}
