package k8s

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// replicaIDs lists the report's replica IDs per GPU and the pending ones.
func replicaIDs(rep scheduler.ClusterReport) string {
	var out []string
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				out = append(out, fmt.Sprintf("%s:%s:%s ready=%v", g.UUID, r.Function, r.ID, r.Ready))
			}
		}
	}
	for _, p := range rep.Pending {
		out = append(out, "pending:"+p.Function+":"+p.ID)
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// clusterOf renders what the leader's state writes: each function's
// record and Deployments.
func clusterOf(t *testing.T, st *state) clusterObjects {
	t.Helper()
	objs := clusterObjects{inventory: st.core.Inventory()}
	for _, v := range st.core.Functions() {
		rec, err := renderRecord(v.Spec, v.Desired, 8080)
		if err != nil {
			t.Fatal(err)
		}
		rec.CreationTimestamp.Time = v.CreatedAt
		objs.records = append(objs.records, rec)
		for _, g := range st.groupSpecs(v.Key) {
			objs.deployments = append(objs.deployments, renderDeployment(g, renderOptions{}))
		}
	}
	return objs
}

// A replica's ID in /system/gpus is its pod's name where it has a pod,
// else a name a rebuild from the same cluster gives again: the leader's
// own view, a rebuild after a restart and a standby's rebuilt view (made
// afresh every second) all show the same IDs.
func TestReplicaIDsSurviveRebuilds(t *testing.T) {
	now := time.Now()
	leader := testState(cluster2x2())
	mustDeploy(t, leader, spec("f", 50, nil), now)
	mustScale(t, leader, "f", 3, now)
	mustDeploy(t, leader, spec("big", 100, nil), now)
	mustScale(t, leader, "big", 4, now) // 2 GPUs left for 4: 2 pending
	objs := clusterOf(t, leader)

	// Pods of f's group of two: one ready, one starting; none yet elsewhere.
	var first string
	for _, g := range leader.groupSpecs("ns/f") {
		if g.Replicas == 2 {
			first = g.Name
		}
	}
	created := now.Add(-time.Minute).Truncate(time.Second)
	pods := []*corev1.Pod{
		functionPod("f", first, first+"-7d9c-ready", created, 4*time.Second),
		functionPod("f", first, first+"-7d9c-start", created, -1),
	}
	objs.pods = pods
	var podObjs []runtime.Object
	for _, p := range pods {
		podObjs = append(podObjs, p)
	}
	b := fakeBackend(t, podObjs...)

	want := replicaIDs(b.report(leader))
	if !strings.Contains(want, first+"-7d9c-ready ready=true") || !strings.Contains(want, first+"-7d9c-start ready=false") {
		t.Fatalf("the pods' names are not the IDs of their replicas:\n%s", want)
	}
	if !strings.Contains(want, "pending:big:big#pending-1") {
		t.Fatalf("pending replicas are not numbered:\n%s", want)
	}
	for i := range 2 {
		rebuilt, _ := restoreState(objs, coreOptions(nil, scheduler.AutoscaleOptions{}), now, nil)
		if got := replicaIDs(b.report(rebuilt)); got != want {
			t.Fatalf("rebuild %d shows other IDs:\n%s\n--- the leader's ---\n%s", i+1, got, want)
		}
	}
}
