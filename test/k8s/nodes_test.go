package k8s

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The fake GPU nodes: V100s as the agent describes them in its
// annotation. Together 6 GPUs, 600 % SM.
const (
	providerNS = "openfaas"
	fnNS       = "openfaas-fn"
	v100       = "Tesla V100-SXM2-16GB"
	v100Mem    = int64(16 << 30)
)

var gpuNodes = []struct {
	name string
	gpus int
}{{"gpu-a", 4}, {"gpu-b", 2}}

func gpuUUID(node string, i int) string { return fmt.Sprintf("GPU-%s-0000-0000-0000-%012d", node, i) }

// agentAnnotation is what `faas-gpu agent` writes on a node with n V100s.
func agentAnnotation(node string, n int) string {
	ng := gpu.NodeGPUs{Source: "nvml"}
	for i := range n {
		ng.GPUs = append(ng.GPUs, gpu.AgentGPU{UUID: gpuUUID(node, i), Index: i, Product: v100, MemoryBytes: v100Mem, SMCount: 80, ComputeMode: "EXCLUSIVE_PROCESS"})
	}
	v, err := gpu.EncodeNodeGPUs(ng)
	if err != nil {
		panic(err)
	}
	return v
}

func gpuNode(name string, n int) *corev1.Node {
	res := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": *resource.NewQuantity(int64(n), resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			// kwok manages nodes with this annotation; node.alpha...ttl=0 is
			// kwokctl's default.
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0", gpu.AnnotationNodeGPUs: agentAnnotation(name, n)},
			Labels:      map[string]string{"kubernetes.io/hostname": name, "type": "kwok", "nvidia.com/gpu.present": "true"},
		},
		Status: corev1.NodeStatus{Capacity: res, Allocatable: res},
	}
}

// setUpCluster makes the provider's namespace and the GPU nodes, and waits
// for the nodes to be Ready and the namespace's default service account.
func setUpCluster(ctx context.Context) error {
	// As the chart makes them: the provider's namespace and the function
	// namespace, labelled for OpenFaaS.
	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: providerNS}},
		{ObjectMeta: metav1.ObjectMeta{Name: fnNS, Labels: map[string]string{"openfaas": "1"}}},
	} {
		if _, err := env.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return ensureNodes(ctx)
}

// ensureNodes puts the standard GPU nodes back as they were (a test may
// have deleted one or changed its GPUs) and waits until they are Ready.
func ensureNodes(ctx context.Context) error {
	for _, n := range gpuNodes {
		want := gpuNode(n.name, n.gpus)
		cur, err := env.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			if _, err := env.client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{}); err != nil {
				return err
			}
		case err != nil:
			return err
		case cur.Annotations[gpu.AnnotationNodeGPUs] != want.Annotations[gpu.AnnotationNodeGPUs]:
			cur.Annotations[gpu.AnnotationNodeGPUs] = want.Annotations[gpu.AnnotationNodeGPUs]
			if _, err := env.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range gpuNodes {
			node, err := env.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err != nil || !nodeReady(node) || len(node.Spec.Taints) > 0 {
				return false, nil
			}
		}
		_, err := env.client.CoreV1().ServiceAccounts(providerNS).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// capacity is every GPU's memory by UUID, for the invariant checks.
func capacity() map[string]int64 {
	out := map[string]int64{}
	for _, n := range gpuNodes {
		for i := range n.gpus {
			out[gpuUUID(n.name, i)] = v100Mem
		}
	}
	return out
}

func requireNodes(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ensureNodes(ctx); err != nil {
		t.Fatalf("GPU nodes: %v", err)
	}
}
