package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// onNode counts a function's Deployments' replicas pinned to node.
func onNode(t *testing.T, name, node string) int {
	t.Helper()
	deps, err := env.client.AppsV1().Deployments(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range deps.Items {
		if d.DeletionTimestamp == nil && d.Annotations["gpu.faas-gpu.dev/node"] == node {
			n += int(*d.Spec.Replicas)
		}
	}
	return n
}

// A node deleted takes its GPUs away: its replicas are placed on other
// GPUs within seconds, or wait when none has room, and are placed again
// when a node comes back. A GPU disappearing from a node's annotation does
// the same for the replicas on it.
func TestNodeLossReplacesReplicas(t *testing.T) {
	requireNodes(t)
	defer requireNodes(t)
	p := startProvider(t, "nodeloss")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	// A filler takes gpu-a's four GPUs, so "model" goes to gpu-b.
	p.deploy(t, fn("filler", 100, "8Gi"))
	p.scale(t, "filler", 4)
	p.ready(t, "filler", 4, 30*time.Second)
	p.deploy(t, fn("model", 50, "4Gi"))
	p.scale(t, "model", 4)
	p.ready(t, "model", 4, 30*time.Second)
	if n := onNode(t, "model", "gpu-b"); n != 4 {
		t.Fatalf("%d replicas of model on gpu-b, want 4", n)
	}
	// Room on gpu-a for the lost replicas: two GPUs.
	p.scale(t, "filler", 2)
	p.ready(t, "filler", 2, 30*time.Second)

	ctx := context.Background()
	start := time.Now()
	if err := env.client.CoreV1().Nodes().Delete(ctx, "gpu-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := poll(20*time.Second, func() bool { return onNode(t, "model", "gpu-a") == 4 && onNode(t, "model", "gpu-b") == 0 }); err != nil {
		t.Fatalf("replicas not re-placed: %d on gpu-a, %d on gpu-b", onNode(t, "model", "gpu-a"), onNode(t, "model", "gpu-b"))
	}
	replaced := time.Since(start)
	p.ready(t, "model", 4, 30*time.Second)
	t.Logf("node deleted: replicas re-placed in %v, all 4 ready again after %v", replaced.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if rep := p.gpus(t); len(rep.Nodes) != 1 || strings.Contains(gpuView(rep), "gpu-b") {
		t.Errorf("the lost node is still in the GPU view:\n%s", gpuView(rep))
	}

	// Nothing fits any more: more replicas wait.
	p.scale(t, "model", 6)
	if err := poll(10*time.Second, func() bool { return len(p.gpus(t).Pending) == 2 }); err != nil {
		t.Fatalf("pending: %+v, want 2", p.gpus(t).Pending)
	}
	// The node comes back: the pending replicas go there.
	requireNodes(t)
	start = time.Now()
	p.ready(t, "model", 6, 30*time.Second)
	t.Logf("node back: pending replicas ready after %v", time.Since(start).Round(time.Millisecond))
	if n := onNode(t, "model", "gpu-b"); n != 2 {
		t.Errorf("%d replicas on gpu-b, want the 2 that waited", n)
	}

	// gpu-b's second GPU disappears (the agent reports one GPU).
	node, err := env.client.CoreV1().Nodes().Get(ctx, "gpu-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations[gpu.AnnotationNodeGPUs] = agentAnnotation("gpu-b", 1)
	if _, err := env.client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gone := gpuUUID("gpu-b", 1)
	if err := poll(20*time.Second, func() bool { return !strings.Contains(gpuView(p.gpus(t)), gone) && !deploymentsUse(t, gone) }); err != nil {
		t.Fatalf("GPU %s still used:\n%s", gone, gpuView(p.gpus(t)))
	}
}

// deploymentsUse reports whether any Deployment is placed on the GPU.
func deploymentsUse(t *testing.T, uuid string) bool {
	deps, err := env.client.AppsV1().Deployments(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if d.DeletionTimestamp == nil && strings.Contains(d.Annotations["gpu.faas-gpu.dev/gpu-uuids"], uuid) {
			return true
		}
	}
	return false
}

// The placeholders make the real scheduler count faas-gpu's GPUs as taken:
// another pod asking for nvidia.com/gpu on a node whose GPUs faas-gpu
// uses stays Pending, and is scheduled once faas-gpu lets a GPU go.
func TestReservationsHoldGPUsAgainstOtherPods(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "reserve", shortWarm...) // a GPU is let go once its warm replica expires
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)

	// Six replicas of a whole GPU each take every GPU of the cluster.
	f := fn("all", 100, "16Gi")
	f.Annotations = &map[string]string{}
	f.Limits = &types.FunctionResources{NvidiaGPU: "1"}
	p.deploy(t, f)
	p.scale(t, "all", 6)
	p.ready(t, "all", 6, 30*time.Second)
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 6 }); err != nil {
		t.Fatalf("%d placeholders, want 6", len(reservations(t)))
	}
	ctx := context.Background()
	if err := poll(20*time.Second, func() bool {
		for _, r := range reservations(t) {
			if r.Spec.NodeName == "" {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("placeholders not scheduled")
	}

	other := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "training-job", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example/train",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
	}
	if _, err := env.client.CoreV1().Pods("default").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer env.client.CoreV1().Pods("default").Delete(ctx, "training-job", metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(0)}) //nolint:errcheck
	if err := poll(10*time.Second, func() bool { return unschedulable(t, "training-job") }); err != nil {
		t.Fatalf("another pod asking for a GPU was not refused while faas-gpu holds all six")
	}
	time.Sleep(time.Second)
	if pod, _ := env.client.CoreV1().Pods("default").Get(ctx, "training-job", metav1.GetOptions{}); pod.Spec.NodeName != "" {
		t.Fatalf("the scheduler gave the other pod a GPU faas-gpu holds (node %s)", pod.Spec.NodeName)
	}

	p.scale(t, "all", 5)
	if err := poll(30*time.Second, func() bool {
		pod, err := env.client.CoreV1().Pods("default").Get(ctx, "training-job", metav1.GetOptions{})
		return err == nil && pod.Spec.NodeName != ""
	}); err != nil {
		t.Fatalf("the other pod was not scheduled after faas-gpu let a GPU go")
	}
}

func unschedulable(t *testing.T, name string) bool {
	pod, err := env.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func ptrInt64(v int64) *int64 { return &v }

// setGPUMemory has the agent of node report mem for GPU uuid (the others
// as a V100's): a GPU whose free memory the driver reports smaller.
func setGPUMemory(t *testing.T, node, uuid string, mem int64) {
	t.Helper()
	gpus := 0
	for _, n := range gpuNodes {
		if n.name == node {
			gpus = n.gpus
		}
	}
	writeAgentAnnotation(t, node, gpus, func(ng *gpu.NodeGPUs) {
		for i := range ng.GPUs {
			if ng.GPUs[i].UUID == uuid {
				ng.GPUs[i].MemoryBytes = mem
			}
		}
	})
}

// A GPU's reported memory shrinks below what its replicas hold: the
// rebook keeps the older function's replica and stops the newer one, whose
// pod still runs there (a finalizer stands in for a kubelet's grace
// period). Until that pod is gone its group is drained and its GPU held:
// a replica of another function placed on the room the allocator has
// there now waits for it. Before, the stop drained nothing and that
// replica's pod started beside the old one (18 GiB of pods on a 16 GiB
// GPU).
func TestNodeLossOfMemoryDrainsTheLostReplica(t *testing.T) {
	requireNodes(t)
	defer requireNodes(t)
	p := startProvider(t, "shrink")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	// Five GPUs full; f (4 GiB) then g (8 GiB) share the sixth.
	filler := fn("filler", 100, "8Gi")
	fl := map[string]string{"com.openfaas.scale.min": "5"}
	filler.Labels = &fl
	p.deploy(t, filler)
	p.ready(t, "filler", 5, 30*time.Second)
	p.deploy(t, fn("f", 30, "4Gi"))
	p.ready(t, "f", 1, 30*time.Second)
	p.deploy(t, fn("g", 30, "8Gi"))
	p.ready(t, "g", 1, 30*time.Second)
	ctx := context.Background()
	deps, err := env.client.AppsV1().Deployments(fnNS).List(ctx, metav1.ListOptions{LabelSelector: "faas_function=g"})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("g's Deployments: %v %v", deps, err)
	}
	node, shared := deps.Items[0].Annotations["gpu.faas-gpu.dev/node"], deps.Items[0].Annotations["gpu.faas-gpu.dev/gpu-uuids"]
	defer setGPUMemory(t, node, shared, v100Mem)

	// 10 GiB: f keeps its 4, g's 8 no longer fit.
	held := holdPods(t, "g")
	setGPUMemory(t, node, shared, 10<<30)
	if err := poll(20*time.Second, func() bool { return len(p.gpus(t).Pending) == 1 && terminating(t, held) == len(held) }); err != nil {
		t.Fatalf("after the shrink: pending %+v, %d of g's %d pods terminating", p.gpus(t).Pending, terminating(t, held), len(held))
	}
	// h fits in the allocator's 6 GiB left there, not beside g's old pod.
	p.deploy(t, fn("h", 30, "6Gi"))
	time.Sleep(2 * time.Second) // time for a wrong start to show
	if n := len(livePods(t, "h")); n != 0 {
		t.Fatalf("%d pods of h on %s while g's old pod still runs there", n, shared)
	}
	releasePods(t, held)
	p.ready(t, "h", 1, 30*time.Second)
}
