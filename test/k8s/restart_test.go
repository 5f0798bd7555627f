package k8s

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// snapshot is what a provider restart must not change: every Deployment
// (name, replicas, UID: not re-created), every placeholder pod (UID), and
// the GPU view.
type snapshot struct {
	deployments map[string]string
	placeholder map[string]string
	gpus        string
}

func takeSnapshot(t *testing.T, p *provider) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{deployments: map[string]string{}, placeholder: map[string]string{}}
	deps, err := env.client.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: "faas_function"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		s.deployments[d.Name] = fmt.Sprintf("%d %s %s", *d.Spec.Replicas, d.UID, d.Annotations["gpu.faas-gpu.dev/spec-hash"])
	}
	for _, r := range reservations(t) {
		s.placeholder[r.Name] = string(r.UID)
	}
	s.gpus = gpuView(p.gpus(t))
	return s
}

// gpuView renders the booked slices per GPU and function, without replica
// IDs (they are the provider's memory, not the cluster's).
func gpuView(rep scheduler.ClusterReport) string {
	var lines []string
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			var rs []string
			for _, r := range g.Replicas {
				rs = append(rs, fmt.Sprintf("%s:%d%%:%dMi", r.Function, r.SMPercent, r.MemoryBytes>>20))
			}
			sort.Strings(rs)
			lines = append(lines, fmt.Sprintf("%s %s %d%% [%s]", n.Name, g.UUID, g.SMAllocated, strings.Join(rs, " ")))
		}
	}
	var pend []string
	for _, p := range rep.Pending {
		pend = append(pend, p.Function)
	}
	sort.Strings(pend)
	return strings.Join(lines, "\n") + "\npending: " + strings.Join(pend, " ")
}

func (s snapshot) diff(o snapshot) string {
	var d []string
	for k, v := range s.deployments {
		if o.deployments[k] != v {
			d = append(d, fmt.Sprintf("deployment %s: %q -> %q", k, v, o.deployments[k]))
		}
	}
	if len(s.deployments) != len(o.deployments) {
		d = append(d, fmt.Sprintf("%d deployments -> %d", len(s.deployments), len(o.deployments)))
	}
	for k, v := range s.placeholder {
		if o.placeholder[k] != v {
			d = append(d, fmt.Sprintf("placeholder %s re-created", k))
		}
	}
	if s.gpus != o.gpus {
		d = append(d, "GPU view:\n"+s.gpus+"\n->\n"+o.gpus)
	}
	return strings.Join(d, "\n")
}

// A restarted provider, stopped cleanly or killed, rebuilds the same view
// from the cluster: same Deployments (not re-created), same placeholders,
// same GPU bookings including the pending replicas; and it goes on placing
// without booking a GPU share twice.
func TestRestartKeepsTheView(t *testing.T) {
	requireNodes(t)
	p1 := startProvider(t, "restart-1")
	p1.leads(t, 10*time.Second)
	watchInvariants(t, p1)

	lbl := map[string]string{"com.openfaas.scale.min": "3"}
	a := fn("alpha", 40, "5Gi")
	a.Labels = &lbl
	p1.deploy(t, a)
	b := fn("beta", 25, "3Gi")
	p1.deploy(t, b)
	p1.scale(t, "beta", 5)
	c := fn("gamma", 100, "16Gi")
	c.Annotations = &map[string]string{}
	c.Limits = &types.FunctionResources{NvidiaGPU: "1"}
	p1.deploy(t, c)
	p1.scale(t, "gamma", 4) // whole GPUs: the 3 free ones, one pending
	p1.ready(t, "alpha", 3, 30*time.Second)
	p1.ready(t, "beta", 5, 30*time.Second)
	before := takeSnapshot(t, p1)
	if !strings.Contains(before.gpus, "pending: gamma") {
		t.Fatalf("expected a pending gamma replica:\n%s", before.gpus)
	}

	// A clean stop hands the Lease over at once.
	p1.stop(t, syscall.SIGTERM)
	start := time.Now()
	p2 := startProvider(t, "restart-2")
	p2.leads(t, 10*time.Second)
	t.Logf("after a clean stop the next instance leads in %v", time.Since(start).Round(time.Millisecond))
	watchInvariants(t, p2)
	if d := before.diff(takeSnapshot(t, p2)); d != "" {
		t.Fatalf("the view changed across a restart:\n%s", d)
	}
	if st := p2.status(t, "beta"); st.Replicas != 5 || st.AvailableReplicas != 5 {
		t.Errorf("beta after restart: %d/%d", st.AvailableReplicas, st.Replicas)
	}

	// kill -9: the Lease must expire first.
	p2.stop(t, syscall.SIGKILL)
	start = time.Now()
	p3 := startProvider(t, "restart-3")
	p3.leads(t, 15*time.Second)
	t.Logf("after kill -9 the next instance leads in %v (Lease duration 2s)", time.Since(start).Round(time.Millisecond))
	watchInvariants(t, p3)
	if d := before.diff(takeSnapshot(t, p3)); d != "" {
		t.Fatalf("the view changed across kill -9:\n%s", d)
	}

	// New work lands only where the restored bookings left room.
	p3.deploy(t, fn("delta", 10, "1Gi"))
	p3.scale(t, "delta", 4)
	p3.ready(t, "delta", 4, 30*time.Second)
	ctx := context.Background()
	if err := checkAll(ctx, p3.gpus(t)); err != nil {
		t.Fatal(err)
	}
	cleanUp(t, p3)
}
