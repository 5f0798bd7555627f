package k8s

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writeAgentAnnotation replaces node's annotation as the agent would after
// reading the node's store and the kubelet's PodResources.
func writeAgentAnnotation(t *testing.T, node string, n int, edit func(*gpu.NodeGPUs)) {
	t.Helper()
	ng, err := gpu.ParseNodeGPUs(node, agentAnnotation(node, n))
	if err != nil {
		t.Fatal(err)
	}
	edit(&ng)
	v, err := gpu.EncodeNodeGPUs(ng)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cur, err := env.client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Annotations[gpu.AnnotationNodeGPUs] = v
	if _, err := env.client.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// servingDeployments are the function's Deployments with replicas.
func servingDeployments(t *testing.T, name string) []appsv1.Deployment {
	t.Helper()
	deps, err := env.client.AppsV1().Deployments(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.Deployment
	for _, d := range deps.Items {
		if d.DeletionTimestamp == nil && d.Spec.Replicas != nil && *d.Spec.Replicas > 0 {
			out = append(out, d)
		}
	}
	return out
}

func visibleDevices(d appsv1.Deployment) string {
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "NVIDIA_VISIBLE_DEVICES" {
			return e.Value
		}
	}
	return ""
}

// The provider on the real API server, with the annotation the agent
// writes: a replica runs on the GPU its placeholder was given; a GPU
// another pod holds is a clash (log line, metric) and the replica moves.
func TestPlaceholderDeviceAndClash(t *testing.T) {
	requireNodes(t)
	t.Cleanup(func() { requireNodes(t) }) // the nodes' standard annotations back
	p := startProvider(t, "placeholders")
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)

	p.deploy(t, fn("pd", 50, "4Gi"))
	var chosen, node string
	if err := poll(20*time.Second, func() bool {
		deps := servingDeployments(t, "pd")
		if len(deps) != 1 {
			return false
		}
		chosen, node = deps[0].Annotations["gpu.faas-gpu.dev/gpu-uuids"], deps[0].Annotations["gpu.faas-gpu.dev/node"]
		return chosen != "" && node != ""
	}); err != nil {
		t.Fatalf("pd was not placed: %v", err)
	}
	var placeholder string
	if err := poll(20*time.Second, func() bool {
		pods, err := env.client.CoreV1().Pods(providerNS).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, pod := range pods.Items {
			if pod.Annotations["gpu.faas-gpu.dev/gpu-uuids"] == chosen {
				placeholder = pod.Name
			}
		}
		return placeholder != ""
	}); err != nil {
		t.Fatalf("no placeholder pod for %s", chosen)
	}
	gpus := 0
	for _, n := range gpuNodes {
		if n.name == node {
			gpus = n.gpus
		}
	}
	// The device plugin gave the placeholder another GPU of the node, one
	// faas-gpu had not chosen: the replica is told that GPU.
	var given string
	for i := range gpus {
		if u := gpuUUID(node, i); u != chosen && given == "" {
			given = u
		}
	}
	writeAgentAnnotation(t, node, gpus, func(ng *gpu.NodeGPUs) {
		ng.Models = []string{"model-pd"}
		ng.Placeholders = []gpu.PodDevices{{Pod: providerNS + "/" + placeholder, Devices: []string{given}}}
	})
	if err := poll(20*time.Second, func() bool {
		deps := servingDeployments(t, "pd")
		return len(deps) == 1 && visibleDevices(deps[0]) == given
	}); err != nil {
		deps := servingDeployments(t, "pd")
		t.Fatalf("replica not moved to its placeholder's GPU %s: %d deployments, first sees %q", given, len(deps), visibleDevices(deps[0]))
	}

	// Another pod now holds the GPU faas-gpu chose: a clash. The replica
	// leaves it, and the provider logs and counts it.
	writeAgentAnnotation(t, node, gpus, func(ng *gpu.NodeGPUs) {
		ng.Placeholders = []gpu.PodDevices{{Pod: providerNS + "/" + placeholder, Devices: []string{given}}}
		ng.Claims = []gpu.PodDevices{{Pod: "ml/trainer", Devices: []string{chosen}}}
	})
	if err := poll(20*time.Second, func() bool { return !deploymentsUse(t, chosen) && len(servingDeployments(t, "pd")) == 1 }); err != nil {
		t.Fatalf("pd still placed on %s, which ml/trainer holds", chosen)
	}
	if !strings.Contains(p.out.String(), "held by another pod through the device plugin") || !strings.Contains(p.out.String(), "ml/trainer") {
		t.Error("no log line for the clash")
	}
	code, body := p.call(t, http.MethodGet, "/metrics", nil)
	if code != http.StatusOK || !strings.Contains(string(body), `faas_gpu_gpu_clashes_total{node="`+node+`"} 1`) {
		t.Errorf("/metrics: %d, no faas_gpu_gpu_clashes_total{node=%q} 1", code, node)
	}
}

// A model in a node's store counts as on that node for placement (the
// node tier), where without a store nothing would prefer that node.
func TestNodeStorePlacesOnItsNode(t *testing.T) {
	requireNodes(t)
	t.Cleanup(func() { requireNodes(t) })
	// gpu-b's store holds the model; best fit alone would not choose it
	// over gpu-a (TestDeployPinsAGroupPerGPU's first GPU).
	writeAgentAnnotation(t, "gpu-b", 2, func(ng *gpu.NodeGPUs) { ng.Models = []string{"model-stored"} })
	p := startProvider(t, "store")
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)
	// The first reconcile, which reads the stores, follows this line.
	if err := poll(10*time.Second, func() bool { return strings.Contains(p.out.String(), "leading: placing replicas") }); err != nil {
		t.Fatal("the provider never said it leads")
	}
	time.Sleep(loopSettle)
	p.deploy(t, fn("stored", 30, "2Gi"))
	var node string
	if err := poll(20*time.Second, func() bool {
		deps := servingDeployments(t, "stored")
		if len(deps) == 1 {
			node = deps[0].Annotations["gpu.faas-gpu.dev/node"]
		}
		return node != ""
	}); err != nil {
		t.Fatal("stored was not placed")
	}
	if node != "gpu-b" {
		t.Fatalf("placed on %s; the model is in gpu-b's store", node)
	}
}

// loopSettle lets the leader's control loop make its first pass (it runs
// every 500 ms); it orders events, it times nothing.
const loopSettle = time.Second
