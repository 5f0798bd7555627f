package k8s

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
)

// An update to the same slice replaces the pods in place (same
// Deployments, Recreate); an update to a bigger slice on full GPUs moves
// the replicas only as the old pods leave, so the pods on a GPU never ask
// for more than it has; what does not fit waits.
func TestUpdateNeverOversubscribes(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "update")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	lbl := map[string]string{"com.openfaas.scale.min": "4"}
	f := fn("vit", 50, "4Gi")
	f.Labels = &lbl
	p.deploy(t, f)
	p.ready(t, "vit", 4, 30*time.Second)
	filler := fn("filler", 50, "4Gi")
	fl := map[string]string{"com.openfaas.scale.min": "8"}
	filler.Labels = &fl
	p.deploy(t, filler)
	p.ready(t, "filler", 8, 30*time.Second) // every GPU full now
	before := groupGPUs(t, "vit")

	// Same slice, new image: every replica drains and is placed afresh (the
	// lifecycle core's update), on the same GPUs since every other GPU is
	// full, in new pods.
	f.Image = "ghcr.io/example/vit:2"
	p.must(t, http.StatusAccepted, http.MethodPut, "/system/functions", f)
	if err := poll(30*time.Second, func() bool {
		deps, err := env.client.AppsV1().Deployments(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=vit"})
		if err != nil {
			return false
		}
		for _, d := range deps.Items {
			if d.Spec.Template.Spec.Containers[0].Image != f.Image || d.Status.ObservedGeneration < d.Generation ||
				d.Status.UpdatedReplicas != *d.Spec.Replicas || d.Status.ReadyReplicas != *d.Spec.Replicas || d.Status.Replicas != *d.Spec.Replicas {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("the new image did not roll out")
	}
	if after := groupGPUs(t, "vit"); !sameGroups(before, after) {
		t.Errorf("replicas moved on an image update: %v -> %v", before, after)
	}

	// A bigger slice: 60 % does not fit next to 50 %, so vit's four 50 %
	// replicas (two GPUs) leave and two 60 % replicas take those GPUs; two
	// wait. The old pods linger while they stop (a finalizer stands in for
	// a real kubelet's grace period): until they are gone their GPUs stay
	// booked and the new replicas wait.
	held := holdPods(t, "vit")
	(*f.Annotations)["com.openfaas.gpu.sm"] = "60"
	p.must(t, http.StatusAccepted, http.MethodPut, "/system/functions", f)
	if err := poll(20*time.Second, func() bool { return terminating(t, held) == len(held) }); err != nil {
		t.Fatalf("old pods not deleted: %d of %d terminating", terminating(t, held), len(held))
	}
	time.Sleep(time.Second) // time for a wrong placement to show
	if rep := p.gpus(t); len(rep.Pending) != 4 {
		t.Errorf("while the old pods stop: %d pending, want all 4 (every GPU is full)", len(rep.Pending))
	}
	releasePods(t, held)
	var st types.FunctionStatus
	if err := poll(30*time.Second, func() bool { st = p.status(t, "vit"); return st.AvailableReplicas == 2 && len(groups(t, "vit")) == 2 }); err != nil {
		t.Fatalf("after the update: %d/%d available, groups %v", st.AvailableReplicas, st.Replicas, groups(t, "vit"))
	}
	if st.Replicas != 4 {
		t.Errorf("desired replicas %d, want 4", st.Replicas)
	}
	if rep := p.gpus(t); len(rep.Pending) != 2 {
		t.Errorf("pending %+v, want 2", rep.Pending)
	}
	// The filler going makes room for the rest.
	p.remove(t, "filler")
	p.ready(t, "vit", 4, 30*time.Second)

	// Unknown functions: 404, as faas-cli's deploy expects to fall back to POST.
	code, _ := p.call(t, http.MethodPut, "/system/functions", fn("nope", 10, "1Gi"))
	if code != http.StatusNotFound {
		t.Errorf("update of an unknown function: %d, want 404", code)
	}
}

const holdFinalizer = "test.faas-gpu.dev/hold"

// holdPods puts a finalizer on a function's pods so that, deleted, they
// linger as a real kubelet's pods do while they stop.
func holdPods(t *testing.T, name string) []string {
	t.Helper()
	ctx := context.Background()
	pods, err := env.client.CoreV1().Pods(fnNS).List(ctx, metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue // already on its way out
		}
		patch := []byte(`{"metadata":{"finalizers":["` + holdFinalizer + `"]}}`)
		if _, err := env.client.CoreV1().Pods(fnNS).Patch(ctx, p.Name, ktypes.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			continue // deleted meanwhile
		}
		names = append(names, p.Name)
	}
	t.Cleanup(func() { releasePods(t, names) })
	return names
}

func releasePods(t *testing.T, names []string) {
	for _, n := range names {
		_, _ = env.client.CoreV1().Pods(fnNS).Patch(context.Background(), n, ktypes.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	}
}

// terminating counts the named pods that are being deleted.
func terminating(t *testing.T, names []string) int {
	n := 0
	for _, name := range names {
		p, err := env.client.CoreV1().Pods(fnNS).Get(context.Background(), name, metav1.GetOptions{})
		if err == nil && p.DeletionTimestamp != nil {
			n++
		}
	}
	return n
}

// groupGPUs counts a function's replicas per GPU set, from its
// Deployments that are not being deleted.
func groupGPUs(t *testing.T, name string) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, d := range liveDeployments(t, name) {
		if *d.Spec.Replicas > 0 {
			out[d.Annotations["gpu.faas-gpu.dev/gpu-uuids"]] += *d.Spec.Replicas
		}
	}
	return out
}

func sameGroups(a, b map[string]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Deleting a function removes its Deployments, pods, Service and the
// placeholders of GPUs nobody else uses; a second delete is 404.
func TestDeleteLeavesNothingBehind(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "delete")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	whole := fn("llm", 100, "16Gi")
	whole.Annotations = &map[string]string{}
	whole.Limits = &types.FunctionResources{NvidiaGPU: "2"} // two whole GPUs on one node
	p.deploy(t, whole)
	p.deploy(t, fn("small", 20, "2Gi"))
	p.ready(t, "llm", 1, 30*time.Second)
	p.ready(t, "small", 1, 30*time.Second)
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 3 }); err != nil {
		t.Fatalf("%d placeholders, want 3 (2 whole GPUs + 1)", len(reservations(t)))
	}
	deps, err := env.client.AppsV1().Deployments(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=llm"})
	if err != nil || len(deps.Items) != 1 {
		t.Fatalf("llm deployments: %v %v", deps, err)
	}
	envs := map[string]string{}
	for _, e := range deps.Items[0].Spec.Template.Spec.Containers[0].Env {
		envs[e.Name] = e.Value
	}
	if envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "0=16384M,1=16384M" || envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "100" {
		t.Errorf("two whole GPUs: env %v", envs)
	}

	p.remove(t, "llm")
	p.remove(t, "small")
	nothingLeft(t, 30*time.Second)
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 0 }); err != nil {
		t.Errorf("%d placeholders left", len(reservations(t)))
	}
	code, _ := p.call(t, http.MethodDelete, "/system/functions", types.DeleteFunctionRequest{FunctionName: "llm"})
	if code != http.StatusNotFound {
		t.Errorf("second delete: %d, want 404", code)
	}
	rep := p.gpus(t)
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			if g.SMAllocated != 0 || len(g.Replicas) != 0 {
				t.Errorf("GPU %s still books %d%%: %+v", g.UUID, g.SMAllocated, g.Replicas)
			}
		}
	}
}
