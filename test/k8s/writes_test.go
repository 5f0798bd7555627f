package k8s

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// replicaIDsOf lists the IDs /system/gpus gives function name's replicas.
func replicaIDsOf(rep scheduler.ClusterReport, name string) []string {
	var ids []string
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if r.Function == name {
					ids = append(ids, r.ID)
				}
			}
		}
	}
	sort.Strings(ids)
	return ids
}

// The longest name the API accepts (63 characters) deploys: its groups'
// names fit the API server's 63-byte label limit. Its replicas' IDs are
// its pods' names, on the leader and on a standby alike.
func TestLongestNameDeploysAndReplicasAreItsPods(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "long-names")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)

	name := strings.Repeat("l", 62) + "g"
	f := fn(name, 60, "4Gi") // 60 %: two replicas, two GPUs, two groups
	f.Labels = &map[string]string{"com.openfaas.scale.min": "2"}
	p.deploy(t, f)
	p.ready(t, name, 2, 30*time.Second)

	pods, err := env.client.CoreV1().Pods(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			want = append(want, pod.Name)
		}
	}
	sort.Strings(want)
	standby := startProvider(t, "long-names-standby")
	for _, q := range []*provider{p, standby} {
		var got []string
		if err := poll(10*time.Second, func() bool {
			got = replicaIDsOf(q.gpus(t), name)
			return strings.Join(got, " ") == strings.Join(want, " ")
		}); err != nil {
			t.Errorf("%s: replica IDs %v, want the pods %v", q.name, got, want)
		}
	}
}

// A deploy whose record the API server refuses (here a quota of no
// Services, no webhook needed) answers an error and leaves nothing: no
// booking, no pending replica, no function. Once the quota is gone, the
// same deploy succeeds; it is never 409 for a function half made.
func TestRefusedDeployLeavesNothing(t *testing.T) {
	requireNodes(t)
	p := startProvider(t, "refused")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-services", Namespace: fnNS},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}}}
	if _, err := env.client.CoreV1().ResourceQuotas(fnNS).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	removed := false
	defer func() {
		if !removed {
			_ = env.client.CoreV1().ResourceQuotas(fnNS).Delete(ctx, quota.Name, metav1.DeleteOptions{})
		}
	}()

	code, body := p.call(t, http.MethodPost, "/system/functions", fn("refused", 30, "2Gi"))
	if code < 500 {
		t.Fatalf("deploy under a quota of no Services: %d %s; want an error", code, body)
	}
	if code, _ := p.call(t, http.MethodGet, "/system/function/refused", nil); code != http.StatusNotFound {
		t.Errorf("the refused function's status: %d, want 404", code)
	}
	rep := p.gpus(t)
	if ids := replicaIDsOf(rep, "refused"); len(ids) != 0 {
		t.Errorf("the refused function still holds GPU shares: %v", ids)
	}
	for _, e := range rep.Pending {
		if e.Function == "refused" {
			t.Errorf("the refused function still has a pending replica: %+v", e)
		}
	}

	if err := env.client.CoreV1().ResourceQuotas(fnNS).Delete(ctx, quota.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	removed = true
	// The quota admission's view lags its deletion: deploy until accepted.
	var codes []int
	if err := poll(30*time.Second, func() bool {
		code, _ := p.call(t, http.MethodPost, "/system/functions", fn("refused", 30, "2Gi"))
		codes = append(codes, code)
		return code == http.StatusAccepted || code == http.StatusConflict
	}); err != nil || codes[len(codes)-1] != http.StatusAccepted {
		t.Fatalf("deploys after the quota went: %v; want them to end in 202, never 409", codes)
	}
	p.ready(t, "refused", 1, 30*time.Second)
}
