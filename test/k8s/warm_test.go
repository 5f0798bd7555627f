package k8s

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// labelWarm marks the pod faas-gpu keeps for a warm replica, out of
// routing.
const labelWarm = "gpu.faas-gpu.dev/warm"

// livePods are a function's pods not being deleted.
func livePods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	pods, err := env.client.CoreV1().Pods(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// A scale to zero keeps the replica warm: its pod stays, labelled out of
// routing, shown idle in /system/gpus with its memory booked and no SMs;
// the scale back to one puts the same pod back in service, with no new
// pod. A placement that needs its memory then removes it.
func TestWarmReplicaKeepsItsPodOnKubernetes(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "warm")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	p.deploy(t, fn("resnet", 30, "4Gi"))
	p.ready(t, "resnet", 1, 20*time.Second)
	pods := livePods(t, "resnet")
	if len(pods) != 1 {
		t.Fatalf("%d pods, want 1", len(pods))
	}
	kept := pods[0]

	warm := func(want bool) {
		t.Helper()
		var cur []corev1.Pod
		err := poll(20*time.Second, func() bool {
			cur = livePods(t, "resnet")
			return len(cur) == 1 && cur[0].UID == kept.UID && (cur[0].Labels[labelWarm] == "true") == want
		})
		if err != nil {
			t.Fatalf("pods %+v; want only %s, warm=%v", podNames(cur), kept.Name, want)
		}
	}

	p.scale(t, "resnet", 0)
	warm(true)
	// The provider counts available pods from its informer, which sees
	// the warm label a moment after the API server the test polls: once
	// the informer has it, the status must be 0/0.
	var st types.FunctionStatus
	if err := poll(5*time.Second, func() bool {
		st = p.status(t, "resnet")
		return st.Replicas == 0 && st.AvailableReplicas == 0
	}); err != nil {
		t.Errorf("status %d/%d at zero with a warm pod; want 0/0 (the gateway scales up from it)", st.AvailableReplicas, st.Replicas)
	}
	if d := liveDeployments(t, "resnet"); len(d) != 1 || *d[0].Spec.Replicas != 1 {
		t.Errorf("deployments %v; want one of 1 holding the warm pod", groups(t, "resnet"))
	}
	found := false
	for _, n := range p.gpus(t).Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if r.Function != "resnet" {
					continue
				}
				found = true
				if r.ID != kept.Name || !r.Idle || r.MemoryBytes != 4<<30 || g.SMAllocated != 0 {
					t.Errorf("/system/gpus: %+v on a GPU at %d%% SM; want %s idle with 4Gi and no SMs", r, g.SMAllocated, kept.Name)
				}
			}
		}
	}
	if !found {
		t.Error("/system/gpus does not show the warm replica")
	}

	p.scale(t, "resnet", 1)
	p.ready(t, "resnet", 1, 20*time.Second)
	warm(false)

	// Warm again, then every GPU asked for whole: the sixth replica needs
	// the warm pod's memory (14Gi + 4Gi > 16Gi).
	p.scale(t, "resnet", 0)
	warm(true)
	lbl := map[string]string{"com.openfaas.scale.max": "6"}
	big := fn("big", 100, "14Gi")
	big.Labels = &lbl
	p.deploy(t, big)
	p.must(t, http.StatusAccepted, http.MethodPost, "/system/scale-function/big?namespace="+fnNS, map[string]any{"serviceName": "big", "replicas": 6})
	p.ready(t, "big", 6, 60*time.Second)
	if _, err := env.client.CoreV1().Pods(fnNS).Get(context.Background(), kept.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the evicted warm pod %s: %v; want it gone", kept.Name, err)
	}
	if n := len(livePods(t, "resnet")); n != 0 {
		t.Errorf("%d resnet pods after the eviction, want 0", n)
	}
	for _, n := range p.gpus(t).Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if r.Function == "resnet" {
					t.Errorf("/system/gpus still books resnet: %+v", r)
				}
			}
		}
	}
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name + " " + p.Labels[labelWarm]
	}
	return out
}
