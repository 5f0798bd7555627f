package k8s

import (
	"context"
	appsv1 "k8s.io/api/apps/v1"
	"net/http"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// groups is the function's Deployments: name -> replicas.
func groups(t *testing.T, name string) map[string]int32 {
	t.Helper()
	out := map[string]int32{}
	for _, d := range liveDeployments(t, name) {
		out[d.Name] = *d.Spec.Replicas
	}
	return out
}

// liveDeployments are a function's Deployments not being deleted.
func liveDeployments(t *testing.T, name string) []appsv1.Deployment {
	t.Helper()
	deps, err := env.client.AppsV1().Deployments(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []appsv1.Deployment
	for _, d := range deps.Items {
		if d.DeletionTimestamp == nil {
			out = append(out, d)
		}
	}
	return out
}

// shortWarm makes replicas taken out of service warm only until the next
// tick, for tests of what a scale-down frees once they are gone.
var shortWarm = []string{"-warm-ttl", "1ms"}

// Scaling up spreads replicas over GPUs as slices fit (3 x 30 % per GPU),
// beyond the cluster's room they wait as pending, and scaling down takes
// whole groups away first (once their warm replicas expire) and frees
// their GPUs' placeholders.
func TestScaleAcrossGPUs(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "scale", shortWarm...)
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	p.deploy(t, fn("bert", 30, "4Gi"))
	p.ready(t, "bert", 1, 20*time.Second)

	// 7 replicas of 30 %: best fit fills a GPU (3) before the next.
	p.scale(t, "bert", 7)
	p.ready(t, "bert", 7, 30*time.Second)
	g := groups(t, "bert")
	total := int32(0)
	for _, n := range g {
		total += n
		if n > 3 {
			t.Errorf("a group of %d x 30 %% on one GPU", n)
		}
	}
	if total != 7 || len(g) != 3 {
		t.Errorf("groups %v: want 7 replicas on 3 GPUs (best fit)", g)
	}
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 3 }); err != nil {
		t.Errorf("%d placeholders for 3 GPUs in use", len(reservations(t)))
	}

	// Down to 2: the smallest groups go first, so GPUs free up whole and
	// their placeholders go.
	p.scale(t, "bert", 2)
	p.ready(t, "bert", 2, 30*time.Second)
	if err := poll(10*time.Second, func() bool { g := groups(t, "bert"); return len(g) == 1 }); err != nil {
		t.Errorf("groups after scaling to 2: %v, want one GPU", groups(t, "bert"))
	}
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 1 }); err != nil {
		t.Errorf("%d placeholders for 1 GPU in use", len(reservations(t)))
	}
}

// Replicas that fit nowhere wait as pending with a reason; scaling down
// drops them first; a function scales to zero (its warm replicas expired)
// and back.
func TestScaleBeyondRoomIsPending(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "pending", shortWarm...)
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	lbl := map[string]string{"com.openfaas.scale.max": "30"}
	f := fn("gpt", 50, "6Gi")
	f.Labels = &lbl
	p.deploy(t, f)
	p.scale(t, "gpt", 14) // 6 GPUs x 2 = 12 fit
	var st types.FunctionStatus
	if err := poll(30*time.Second, func() bool { st = p.status(t, "gpt"); return st.AvailableReplicas == 12 }); err != nil {
		t.Fatalf("status %d/%d, want 12 available", st.AvailableReplicas, st.Replicas)
	}
	if st.Replicas != 14 {
		t.Errorf("replicas %d, want the desired 14", st.Replicas)
	}
	rep := p.gpus(t)
	if len(rep.Pending) != 2 || rep.Pending[0].Reason == "" {
		t.Errorf("pending: %+v, want 2 with a reason", rep.Pending)
	}
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			if g.SMAllocated != 100 {
				t.Errorf("GPU %s: %d%% allocated, want full", g.UUID, g.SMAllocated)
			}
		}
	}

	// Scaling down to 5 drops the pending first, then whole groups.
	p.scale(t, "gpt", 5)
	p.ready(t, "gpt", 5, 30*time.Second)
	if err := poll(10*time.Second, func() bool { return len(groups(t, "gpt")) == 3 }); err != nil {
		t.Errorf("groups after scaling to 5: %v, want 3 GPUs (2+2+1)", groups(t, "gpt"))
	}
	if err := poll(10*time.Second, func() bool { return len(reservations(t)) == 3 }); err != nil {
		t.Errorf("%d placeholders, want 3: freed GPUs give their placeholder up", len(reservations(t)))
	}
	if rep := p.gpus(t); len(rep.Pending) != 0 {
		t.Errorf("pending after scaling down: %+v", rep.Pending)
	}

	// To zero and back: the gateway's scale-from-zero path.
	p.scale(t, "gpt", 0)
	if err := poll(20*time.Second, func() bool { return len(groups(t, "gpt")) == 0 }); err != nil {
		t.Errorf("groups at zero: %v", groups(t, "gpt"))
	}
	if st := p.status(t, "gpt"); st.Replicas != 0 {
		t.Errorf("replicas at zero: %d", st.Replicas)
	}
	p.must(t, http.StatusAccepted, http.MethodPost, "/system/scale-function/gpt?namespace="+fnNS, map[string]any{"serviceName": "gpt", "replicas": 1})
	p.ready(t, "gpt", 1, 20*time.Second)
}
