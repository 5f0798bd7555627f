package k8s

import (
	"sort"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// functionPod is a pod of group in namespace ns made at created; ready
// after readyAfter when that is not negative.
func functionPod(fn, group, name string, created time.Time, readyAfter time.Duration) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(created),
			Labels: map[string]string{LabelFunction: fn, LabelGroup: group, LabelManagedBy: managedBy}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if readyAfter >= 0 {
		p.Status.Phase, p.Status.PodIP = corev1.PodRunning, "10.0.0.1"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(created.Add(readyAfter))}}
	}
	return p
}

// TestPodStartupCountedOnceOnTheLeader: a function pod's start-up counts
// the first time it turns ready, on the leader, if it was made while this
// instance led.
func TestPodStartupCountedOnceOnTheLeader(t *testing.T) {
	b := fakeBackend(t)
	st := testState(cluster2x2())
	b.st = st
	made := time.Now().Truncate(time.Second).Add(time.Second) // Kubernetes' whole seconds
	count := func() (uint64, float64) {
		s := st.stats.Stats().StartupSeconds
		return s.Count, s.Sum
	}
	steps := []struct {
		name       string
		old, cur   *corev1.Pod
		count      uint64
		sumSeconds float64
	}{
		{"turns ready", functionPod("f", "f-1", "p1", made, -1), functionPod("f", "f-1", "p1", made, 3*time.Second), 1, 3},
		{"ready again after a failed probe", functionPod("f", "f-1", "p1", made, -1), functionPod("f", "f-1", "p1", made, time.Minute), 1, 3},
		{"stays ready", functionPod("f", "f-1", "p2", made, time.Second), functionPod("f", "f-1", "p2", made, time.Second), 1, 3},
		{"made before this instance led", functionPod("f", "f-1", "p3", made.Add(-time.Hour), -1), functionPod("f", "f-1", "p3", made.Add(-time.Hour), time.Second), 1, 3},
		{"not a function's replica", functionPod("f", "", "p4", made, -1), functionPod("f", "", "p4", made, time.Second), 1, 3},
		{"another turns ready", functionPod("f", "f-1", "p5", made, -1), functionPod("f", "f-1", "p5", made, 2*time.Second), 2, 5},
	}
	for _, s := range steps {
		b.podUpdated(s.old, s.cur)
		if n, sum := count(); n != s.count || sum != s.sumSeconds {
			t.Fatalf("%s: %d start-ups of %gs in all, want %d of %gs", s.name, n, sum, s.count, s.sumSeconds)
		}
	}
	b.podDeleted(functionPod("f", "f-1", "p1", made, time.Second))
	if st.started["uid-p1"] {
		t.Fatal("a deleted pod is still remembered")
	}
	b.st = nil // a standby counts nothing, and does not fail
	b.podUpdated(functionPod("f", "f-1", "p6", made, -1), functionPod("f", "f-1", "p6", made, time.Second))
}

// TestReportCarriesDecisionsReasonsAndStartups: /system/gpus on
// Kubernetes carries the leader's decisions, each pending replica's reason
// code and each ready replica's start-up from its pod.
func TestReportCarriesDecisionsReasonsAndStartups(t *testing.T) {
	now := time.Now()
	st := testState(cluster2x2())
	mustDeploy(t, st, spec("f", 50, nil), now)
	mustScale(t, st, "f", 9, now) // 8 fit, two to a GPU; the ninth lacks SM
	v, _ := st.core.Function(fnKey("ns", "f"))
	first := st.groups(v)[0]
	created := now.Add(-time.Minute).Truncate(time.Second)
	b := fakeBackend(t,
		functionPod("f", first.name, "a", created, 5*time.Second),
		functionPod("f", first.name, "b", created, 2*time.Second),
		functionPod("f", first.name, "c", created, -1), // a third, not ready: a replacement starting
	)
	b.st = st
	rep := b.report(st)

	if d := rep.Stats.Decisions; d.Placed != 8 || d.Pending != 1 || d.Seconds.Count != 9 {
		t.Fatalf("decisions %+v, want 8 placed and 1 pending, all timed", d)
	}
	if len(rep.Pending) != 1 || rep.Pending[0].ReasonCode != scheduler.NoFitSM {
		t.Fatalf("pending %+v, want one lacking SM", rep.Pending)
	}
	var got []float64
	ready := 0
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if r.Ready != (r.ReadyAfterSeconds != nil) {
					t.Errorf("replica %s: ready %v with readyAfterSeconds %v", r.ID, r.Ready, r.ReadyAfterSeconds)
				}
				if r.Ready {
					ready++
					got = append(got, *r.ReadyAfterSeconds)
				}
			}
		}
	}
	sort.Float64s(got)
	if ready != 2 || len(got) != 2 || got[0] != 2 || got[1] != 5 {
		t.Fatalf("%d ready replicas with start-ups %v, want 2 with 2s and 5s", ready, got)
	}
	if len(rep.Stats.Autoscaler) != 0 {
		t.Fatalf("autoscaler actions %+v for a function it does not manage", rep.Stats.Autoscaler)
	}
}

// TestAutoscalerActionsCounted: each applied decision counts once, by
// direction; scaling to zero is down.
func TestAutoscalerActionsCounted(t *testing.T) {
	now := time.Now()
	st := testState(cluster2x2())
	mustDeploy(t, st, spec("z", 50, map[string]string{"com.openfaas.scale.zero": "true", "com.openfaas.scale.zero-duration": "30s"}), now)
	idle := func(string) lifecycle.Load { return lifecycle.Load{LastRequest: now} }
	st.tick(now.Add(time.Minute), idle, false)
	st.tick(now.Add(2*time.Minute), idle, false) // at zero already: nothing to do
	b := fakeBackend(t)
	rep := b.report(st)
	want := []scheduler.ScaleActions{{Function: "z", Namespace: "ns", Down: 1}}
	if len(rep.Stats.Autoscaler) != 1 || rep.Stats.Autoscaler[0] != want[0] {
		t.Fatalf("autoscaler actions %+v, want %+v", rep.Stats.Autoscaler, want)
	}
}

// TestCacheCountsRequestsAndStartups: on Kubernetes the cache counters
// count what local mode counts, a hit for each request to a pod holding
// its model, a miss for one no pod holds and for each pod loading its
// model at start; rebuilding the state (a new leader, a standby's view)
// neither resets nor re-counts them.
func TestCacheCountsRequestsAndStartups(t *testing.T) {
	now := time.Now()
	st := testState(cluster2x2())
	mustDeploy(t, st, spec("f", 50, nil), now)
	group := st.groupSpecs("ns/f")[0].Name
	made := now.Truncate(time.Second).Add(time.Second)
	ready := functionPod("f", group, "f-pod", made, 3*time.Second)
	ready.Annotations = map[string]string{AnnotationModel: "m-f"}
	b := fakeBackend(t, ready)
	b.st = st
	steps := []struct {
		name         string
		do           func(t *testing.T)
		hits, misses uint64
	}{
		{"the pod turns ready: its model loaded", func(t *testing.T) {
			starting := ready.DeepCopy()
			starting.Status = corev1.PodStatus{Phase: corev1.PodPending}
			b.podUpdated(starting, ready)
		}, 0, 1},
		{"a request for the function's model", func(t *testing.T) { endpoints(t, b, "") }, 1, 1},
		{"another one", func(t *testing.T) { endpoints(t, b, "m-f") }, 2, 1},
		{"a model no pod holds", func(t *testing.T) { endpoints(t, b, "other") }, 2, 2},
		{"the state rebuilt", func(t *testing.T) {
			b.mu.Lock()
			b.st, _ = restoreState(clusterObjects{inventory: cluster2x2()}, coreOptions(nil, scheduler.AutoscaleOptions{}), now, nil)
			b.mu.Unlock()
		}, 2, 2},
	}
	for _, s := range steps {
		s.do(t)
		c := b.report(b.st).Cache
		if c.Hits != s.hits || c.Misses != s.misses {
			t.Fatalf("%s: %d hits, %d misses; want %d, %d", s.name, c.Hits, c.Misses, s.hits, s.misses)
		}
	}
}

// endpoints asks for f's endpoints as the proxy does once per request.
func endpoints(t *testing.T, b *Backend, model string) {
	t.Helper()
	rt, err := b.Route("ns", "f", model)
	if eps := rt.Endpoints; err != nil || len(eps) != 1 {
		t.Fatalf("endpoints %+v, %v; want the ready pod", rt.Endpoints, err)
	}
}
