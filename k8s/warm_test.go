package k8s

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// oneGPU is one node with one 16 GiB GPU, so that a placement needs a warm
// replica's memory.
func oneGPU() gpu.Inventory {
	return gpu.Inventory{Source: "test", Nodes: []gpu.Node{{Name: "a", GPUs: []gpu.Device{
		{UUID: "GPU-a0", Node: "a", Product: "Tesla V100-SXM2-16GB", MemoryBytes: 16 << 30, SMCount: 80}}}}}
}

// specMem is spec with a memory request.
func specMem(name string, sm int, mem string) scheduler.Function {
	ann := map[string]string{gpu.AnnotationSM: fmt.Sprint(sm), gpu.AnnotationMemory: mem, gpu.AnnotationModel: "m-" + name}
	req, err := gpu.ParseRequest(name, ann, "")
	if err != nil {
		panic(err)
	}
	pol, err := scheduler.ParseScalePolicy(nil, nil)
	if err != nil {
		panic(err)
	}
	return scheduler.Function{Deployment: types.FunctionDeployment{Service: name, Namespace: "ns", Image: "img", Annotations: &ann}, GPU: req, Scale: pol}
}

// usage is the SM % and memory booked on uuid.
func usage(s *state, uuid string) (int, int64) {
	for _, u := range s.core.Usage() {
		if u.Device.UUID == uuid {
			return u.SMAllocated, u.MemoryAllocated
		}
	}
	return 0, 0
}

// A scale-down demotes: the group keeps its pod (the Deployment's count
// holds the warm replica), its SM share is released, its memory stays
// booked, nothing drains; the scale-up promotes it back in the same group.
// Seen failing with NoWarm (the group scaled to zero and drained).
func TestScaleDownKeepsAWarmPod(t *testing.T) {
	now := time.Now()
	s := testState(cluster2x2())
	mustDeploy(t, s, spec("f", 50, nil), now)
	g := s.groupSpecs("ns/f")
	if len(g) != 1 {
		t.Fatalf("groups %+v", g)
	}
	name, gpuID := g[0].Name, g[0].Placement.GPUs[0]
	// sm is what the GPU books once the writer has labelled the warm pod
	// and the loop has confirmed it; until then the demoted share is held.
	steps := []struct {
		to             int
		warm, replicas int
		sm             int
	}{
		{to: 0, warm: 1, replicas: 1, sm: 0},
		{to: 1, warm: 0, replicas: 1, sm: 50},
		{to: 0, warm: 1, replicas: 1, sm: 0},
	}
	for _, st := range steps {
		res, _, err := s.core.Scale("ns", "f", st.to, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range res.Effects {
			if e.Kind == lifecycle.Start || e.Kind == lifecycle.Stop {
				t.Errorf("scale to %d: %s of %s; want a demote or promote only", st.to, e.Kind, e.Replica.ID)
			}
		}
		s.apply(res, 0, now)
		g := s.groupSpecs("ns/f")
		if len(g) != 1 || g[0].Name != name || g[0].Replicas != st.replicas {
			t.Fatalf("scale to %d: groups %+v; want %s of %d", st.to, g, name, st.replicas)
		}
		if len(s.warmPod) != st.warm || len(s.drains) != 0 {
			t.Fatalf("scale to %d: warm %v drains %v", st.to, s.warmPod, s.drains)
		}
		if sm, _ := usage(s, gpuID); sm != 50 {
			t.Fatalf("scale to %d, before the writer: %s books %d%%; want the replica's 50%% held", st.to, gpuID, sm)
		}
		for id := range s.warmPod {
			s.warmPod[id] = "f-pod" // the writer labelled it
		}
		s.confirmDemotes(now)
		if sm, mem := usage(s, gpuID); sm != st.sm || mem != 4<<30 {
			t.Fatalf("scale to %d: %s books %d%% and %d bytes; want %d%% and 4Gi", st.to, gpuID, sm, mem, st.sm)
		}
	}
}

// scaleApply scales f of s to n and applies it.
func scaleApply(t *testing.T, s *state, fn string, n int, now time.Time) {
	t.Helper()
	res, _, err := s.core.Scale("ns", fn, n, now)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(res, 0, now)
}

// The writer ties a demoted replica to its group's newest ready pod,
// labels it out of routing with a low deletion cost, unlabels it when it
// is promoted, and deletes it when a placement evicts the replica for its
// memory (the group shrinking by one at the same time).
func TestWarmPodsOutOfRoutingAndEvicted(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	s := newState(oneGPU(), coreOptions(nil, scheduler.AutoscaleOptions{}), nil)
	mustDeploy(t, s, specMem("f", 20, "4Gi"), now)
	scaleApply(t, s, "f", 2, now)
	group := s.groupSpecs("ns/f")[0].Name
	made := now.Truncate(time.Second)
	older := functionPod("f", group, "f-older", made.Add(-time.Minute), time.Second)
	newer := functionPod("f", group, "f-newer", made, time.Second)
	b := fakeBackend(t, older, newer)
	b.st = s
	pod := func(name string) *corev1.Pod {
		t.Helper()
		p, err := b.client.CoreV1().Pods("ns").Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func() {
		t.Helper()
		b.mu.Lock()
		plan := s.warmPlan("ns/f")
		b.mu.Unlock()
		if err := b.syncWarm(ctx, "ns/f", plan); err != nil {
			t.Fatal(err)
		}
		s.confirmDemotes(now) // the loop's next pass
	}
	// routed waits for the informer to see the patches (no speed assert:
	// the deadline only ends a hung test).
	routed := func(want ...string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			rt, err := b.Route("ns", "f", "")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ep := range rt.Endpoints {
				got = append(got, ep.ID)
			}
			if fmt.Sprint(got) == fmt.Sprint(want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("routed to %v, want %v", got, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	routed("f-newer", "f-older")

	scaleApply(t, s, "f", 1, now)
	write()
	p := pod("f-newer")
	if !podWarm(p) || p.Annotations[annotationDeletionCost] != warmDeletionCost {
		t.Fatalf("demoted: newest pod labels %v annotations %v; want it warm, deleted first", p.Labels, p.Annotations)
	}
	if podWarm(pod("f-older")) {
		t.Fatal("the pod in service is labelled warm")
	}
	routed("f-older")

	scaleApply(t, s, "f", 2, now)
	write()
	if p := pod("f-newer"); podWarm(p) || p.Annotations[annotationDeletionCost] != "" {
		t.Fatalf("promoted: labels %v annotations %v; want it back in routing", p.Labels, p.Annotations)
	}
	routed("f-newer", "f-older")

	scaleApply(t, s, "f", 1, now)
	write()
	routed("f-older")
	var warmID string
	for id, name := range s.warmPod {
		if name != "f-newer" {
			t.Fatalf("warm replica %s tied to %q, want f-newer", id, name)
		}
		warmID = id
	}
	// g needs 12Gi: only with the warm replica's 4Gi. The core stops the
	// warm replica and holds its memory while its pod goes; g waits.
	mustDeploy(t, s, specMem("g", 20, "12Gi"), now)
	if v, held := s.core.Replica(warmID); !held || v.Phase != lifecycle.Draining {
		t.Fatalf("the evicted warm replica: %+v (held %v); want it draining, its memory booked", v, held)
	}
	if gs := s.groupSpecs("ns/f"); len(gs) != 1 || gs[0].Replicas != 1 {
		t.Fatalf("f's groups %+v; want one pod left", gs)
	}
	if gs := s.groupSpecs("ns/g"); len(gs) != 0 {
		t.Fatalf("g placed while the evicted pod runs on its GPU: %+v", gs)
	}
	write()
	if pod("f-newer") != nil {
		t.Fatal("the evicted warm replica's pod still exists")
	}
	if pod("f-older") == nil {
		t.Fatal("the pod in service was deleted")
	}
	// Once the informer has seen it go, the eviction ends, the drain with
	// it, and g is placed in the memory it held.
	deadline := time.Now().Add(10 * time.Second)
	for len(s.evictions) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("evictions left %v", s.evictions)
		}
		time.Sleep(10 * time.Millisecond)
		write()
	}
	s.checkDrains(func(string, string, int) bool { return true }, now)
	if _, held := s.core.Replica(warmID); held {
		t.Fatal("the evicted warm replica is still booked after its pod went")
	}
	if gs := s.groupSpecs("ns/g"); len(gs) != 1 || gs[0].Replicas != 1 {
		t.Fatalf("g's groups %+v after the evicted pod went; want its replica", gs)
	}
}

// A warm replica past its TTL drains: its booking is held until its pod is
// gone, and its own pod is the one removed.
func TestExpiredWarmReplicaDrainsItsOwnPod(t *testing.T) {
	now := time.Now()
	s := testState(cluster2x2())
	mustDeploy(t, s, spec("f", 50, nil), now)
	scaleApply(t, s, "f", 2, now)
	scaleApply(t, s, "f", 1, now)
	for id := range s.warmPod {
		s.warmPod[id] = "f-pod-2"
	}
	s.confirmDemotes(now) // its idle time starts once it is out of routing
	s.tick(now.Add(lifecycle.DefaultWarmTTL+time.Minute), func(string) lifecycle.Load { return lifecycle.Load{} }, false)
	if len(s.warmPod) != 0 {
		t.Fatalf("warm %v after the TTL", s.warmPod)
	}
	if e, ok := s.evictions["ns/f-pod-2"]; !ok || e.fn != "ns/f" {
		t.Fatalf("evictions %v; want the warm pod", s.evictions)
	}
	if len(s.drains) != 1 {
		t.Fatalf("drains %v; want the expired replica's booking held", s.drains)
	}
}

// A restart brings a pod labelled warm back as its warm replica, tied to
// it, not as a replica in service.
func TestRestoreKeepsWarmPods(t *testing.T) {
	now := time.Now()
	inv := cluster2x2()
	f := spec("f", 50, nil)
	rec, err := renderRecord(f, 1, 8080)
	if err != nil {
		t.Fatal(err)
	}
	p := placement("a", "GPU-a0")
	cfg := scheduler.SliceConfig{SMPercent: 50, Batch: 1}
	name := groupName("f", p, cfg)
	dep := renderDeployment(groupSpec{Function: f, Name: name, Placement: p, Config: cfg, Replicas: 2}, renderOptions{})
	serving := functionPod("f", name, "f-a", now.Add(-time.Minute), time.Second)
	kept := functionPod("f", name, "f-b", now, time.Second)
	kept.Labels[LabelWarm] = "true"
	s, _ := restoreState(clusterObjects{inventory: inv, records: []*corev1.Service{rec}, deployments: []*appsv1.Deployment{dep}, pods: []*corev1.Pod{serving, kept}},
		coreOptions(nil, scheduler.AutoscaleOptions{}), now, nil)
	v, _ := s.core.Function("ns/f")
	if len(v.Live) != 1 || len(v.Warm) != 1 || v.Warm[0].ID != "ns/f-b" {
		t.Fatalf("live %+v warm %+v; want f-b warm", v.Live, v.Warm)
	}
	if s.warmPod["ns/f-b"] != "f-b" || len(s.drains) != 0 {
		t.Fatalf("warm %v drains %v", s.warmPod, s.drains)
	}
	if g := s.groupSpecs("ns/f"); len(g) != 1 || g[0].Replicas != 2 {
		t.Fatalf("groups %+v; want the Deployment kept at 2", g)
	}
}

// A replica demoted before its pod existed has no pod to keep yet: the
// loop's pass (checkDrains) asks for its function to be written until the
// writer has tied one, then no more.
func TestUntiedWarmReplicaIsWrittenAgain(t *testing.T) {
	now := time.Now()
	s := testState(cluster2x2())
	mustDeploy(t, s, spec("f", 50, nil), now)
	none := func(string, string, int) bool { return false }
	if _, dirty := s.checkDrains(none, now); dirty["ns/f"] {
		t.Fatal("f written again with nothing warm")
	}
	scaleApply(t, s, "f", 0, now)
	if _, dirty := s.checkDrains(none, now); !dirty["ns/f"] {
		t.Fatal("the untied warm replica's function is not written again")
	}
	for id := range s.warmPod {
		s.warmPod[id] = "f-pod"
	}
	if _, dirty := s.checkDrains(none, now); dirty["ns/f"] {
		t.Fatal("f written again once its warm replica has a pod")
	}
}

// A function scaled to zero whose pod is kept warm has no replica
// available: the gateway's scale-from-zero depends on it.
func TestWarmPodIsNotAvailable(t *testing.T) {
	now := time.Now()
	s := testState(cluster2x2())
	mustDeploy(t, s, spec("f", 50, nil), now)
	group := s.groupSpecs("ns/f")[0].Name
	kept := functionPod("f", group, "f-pod", now.Truncate(time.Second), time.Second)
	kept.Labels[LabelWarm] = "true"
	b := fakeBackend(t, kept)
	b.st = s
	scaleApply(t, s, "f", 0, now)
	st, err := b.Status(context.Background(), "ns", "f")
	if err != nil {
		t.Fatal(err)
	}
	if st.Replicas != 0 || st.AvailableReplicas != 0 {
		t.Fatalf("status %d/%d; want 0 available with the pod kept warm", st.AvailableReplicas, st.Replicas)
	}
}

// A demoted replica's SM share stays booked in the core while its pod
// serves, until the writer has labelled the pod out of routing; the loop
// then confirms the demote and what waited for the share is placed.
func TestWarmPodHoldsItsSMShareUntilLabelled(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	s := newState(oneGPU(), coreOptions(nil, scheduler.AutoscaleOptions{}), nil)
	mustDeploy(t, s, specMem("f", 60, "2Gi"), now)
	fg := s.groupSpecs("ns/f")[0]
	pod := functionPod("f", fg.Name, "f-a", now.Truncate(time.Second), time.Second)
	pod.Annotations = placementAnnotations(fg.Placement, fg.Config)
	b := fakeBackend(t, pod)
	b.st = s
	sm := func() int { return s.core.Usage()[0].SMAllocated }
	gPlaced := func() bool {
		v, _ := s.core.Function("ns/g")
		return len(v.Live) == 1 && v.Live[0].Placement != nil
	}
	scaleApply(t, s, "f", 0, now)
	mustDeploy(t, s, specMem("g", 60, "2Gi"), now)
	if sm() != 60 || gPlaced() {
		t.Fatalf("%d %% SM booked, g placed %v, while f's pod is not labelled: want f's 60 %% held and g waiting", sm(), gPlaced())
	}
	if dirty := s.confirmDemotes(now); len(dirty) != 0 || sm() != 60 || gPlaced() {
		t.Fatalf("confirmed with no pod labelled: dirty %v, %d %% SM, g placed %v", dirty, sm(), gPlaced())
	}
	b.mu.Lock()
	plan := s.warmPlan("ns/f")
	b.mu.Unlock()
	if err := b.syncWarm(ctx, "ns/f", plan); err != nil {
		t.Fatal(err)
	}
	if p, err := b.client.CoreV1().Pods("ns").Get(ctx, "f-a", metav1.GetOptions{}); err != nil || !podWarm(p) {
		t.Fatalf("f's pod not labelled warm: %v", err)
	}
	dirty := s.confirmDemotes(now)
	if !dirty["ns/g"] || !gPlaced() || sm() != 60 {
		t.Fatalf("once f's pod is labelled: dirty %v, g placed %v, %d %% SM; want g placed on f's share", dirty, gPlaced(), sm())
	}
}
