package k8s

import (
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func placement(node string, gpus ...string) scheduler.Placement {
	return scheduler.Placement{Node: node, GPUs: gpus, Slice: gpu.Slice{SMPercent: 50, MemoryBytes: 4 << 30}}
}

// cluster2x2 is two nodes of two 16 GiB GPUs.
func cluster2x2() gpu.Inventory {
	inv := gpu.Inventory{Source: "test"}
	for _, n := range []string{"a", "b"} {
		node := gpu.Node{Name: n}
		for i := range 2 {
			node.GPUs = append(node.GPUs, gpu.Device{UUID: fmt.Sprintf("GPU-%s%d", n, i), Node: n, Index: i, Product: "Tesla V100-SXM2-16GB", MemoryBytes: 16 << 30, SMCount: 80})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	return inv
}

func spec(name string, sm int, labels map[string]string) scheduler.Function {
	ann := map[string]string{gpu.AnnotationSM: fmt.Sprint(sm), gpu.AnnotationMemory: "4Gi", gpu.AnnotationModel: "m-" + name}
	req, err := gpu.ParseRequest(name, ann, "")
	if err != nil {
		panic(err)
	}
	pol, err := scheduler.ParseScalePolicy(labels, nil)
	if err != nil {
		panic(err)
	}
	return scheduler.Function{Deployment: types.FunctionDeployment{Service: name, Namespace: "ns", Image: "img", Annotations: &ann, Labels: &labels}, GPU: req, Scale: pol}
}

// testState is the state of a leader on inv, with no profiles.
func testState(inv gpu.Inventory) *state {
	return newState(inv, coreOptions(nil, scheduler.AutoscaleOptions{}), nil)
}

func mustDeploy(t *testing.T, s *state, f scheduler.Function, now time.Time) {
	t.Helper()
	res, err := s.core.Deploy(f, now)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(res, 0, now)
}

// mustScale scales function name of namespace ns to n, as the API does.
func mustScale(t *testing.T, s *state, name string, n int, now time.Time) {
	t.Helper()
	res, _, err := s.core.Scale("ns", name, n, now)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(res, 0, now)
}

// layout renders fn's groups as node/GPU:replicas, sorted, plus pending.
func layout(s *state, name string) string {
	v, _ := s.core.Function(fnKey("ns", name))
	var out []string
	for _, g := range s.groups(v) {
		out = append(out, fmt.Sprintf("%s:%d", strings.Join(g.placement.GPUs, "+"), len(g.ids)))
	}
	sort.Strings(out)
	pending := 0
	for _, r := range v.Live {
		if r.Placement == nil {
			pending++
		}
	}
	return fmt.Sprintf("%s pending=%d", strings.Join(out, " "), pending)
}

// smUsed sums the allocator's SM % per GPU.
func smUsed(s *state) map[string]int {
	out := map[string]int{}
	for _, u := range s.core.Usage() {
		out[u.Device.UUID] = u.SMAllocated
	}
	return out
}

// The drain path, which deletes and expired warm replicas take: run with
// NoWarm so that a scale-down takes it too and the counts stay in one test
// (TestScaleDownKeepsAWarmPod has the backend's own scale-down).
func TestScaleFillsGPUsAndDrainsBeforeFreeing(t *testing.T) {
	now := time.Now()
	opts := coreOptions(nil, scheduler.AutoscaleOptions{})
	opts.NoWarm = true
	s := newState(cluster2x2(), opts, nil)
	mustDeploy(t, s, spec("f", 50, nil), now)
	mustScale(t, s, "f", 5, now)
	if got := layout(s, "f"); got != "GPU-a0:2 GPU-a1:2 GPU-b0:1 pending=0" {
		t.Fatalf("layout %s", got)
	}
	mustScale(t, s, "f", 9, now)
	if got := layout(s, "f"); got != "GPU-a0:2 GPU-a1:2 GPU-b0:2 GPU-b1:2 pending=1" {
		t.Fatalf("over capacity: %s", got)
	}

	// Down to 3: the pending one first, then the newest in service (the
	// lifecycle core's rule: the last GPUs filled); their bookings stay
	// until their pods are gone.
	mustScale(t, s, "f", 3, now)
	if got := layout(s, "f"); got != "GPU-a0:2 GPU-a1:1 pending=0" {
		t.Fatalf("after scaling down: %s", got)
	}
	if used := smUsed(s); used["GPU-b0"] != 100 || used["GPU-b1"] != 100 {
		t.Fatalf("drained GPUs freed before their pods went: %v", used)
	}
	// Another function cannot have them meanwhile.
	mustDeploy(t, s, spec("g", 60, nil), now)
	if got := layout(s, "g"); got != " pending=1" {
		t.Fatalf("g placed on a draining GPU: %s", got)
	}
	// Pods of b0's group still running: nothing released.
	running := map[string]int{}
	for _, d := range s.drains {
		running[d.group] = 2 // each group had two pods
	}
	settled := func(ns, group string, size int) bool { return running[group] <= size }
	if ended, _ := s.checkDrains(settled, now); len(ended) != 0 {
		t.Fatal("a drain ended while its pods ran")
	}
	for k := range running {
		running[k] = 0
	}
	ended, dirty := s.checkDrains(settled, now)
	if len(ended) != 3 { // b0, b1, and a1's extra replica
		t.Fatalf("%d drains ended, want 3", len(ended))
	}
	// g is placed as soon as a GPU it fits is free: b0 or b1, whichever
	// drain ended first.
	if got := layout(s, "g"); got != "GPU-b0:1 pending=0" && got != "GPU-b1:1 pending=0" {
		t.Fatalf("g after the drains: %s", got)
	}
	if !dirty["ns/g"] {
		t.Error("g, placed once the drains ended, is not marked for writing")
	}
}

func TestNodeLossMakesReplicasPendingThenPlacesThem(t *testing.T) {
	now := time.Now()
	inv := cluster2x2()
	s := testState(inv)
	mustDeploy(t, s, spec("f", 100, map[string]string{scheduler.LabelScaleMin: "4"}), now)
	if got := layout(s, "f"); got != "GPU-a0:1 GPU-a1:1 GPU-b0:1 GPU-b1:1 pending=0" {
		t.Fatalf("layout %s", got)
	}
	onlyA := gpu.Inventory{Source: "test", Nodes: inv.Nodes[:1]}
	dirty := s.setInventory(onlyA, nil, now)
	if !dirty["ns/f"] {
		t.Error("the function that lost replicas is not marked for writing")
	}
	if got := layout(s, "f"); got != "GPU-a0:1 GPU-a1:1 pending=2" {
		t.Fatalf("after losing node b: %s", got)
	}
	// A GPU of a disappears too: its replica waits as well.
	aOne := gpu.Inventory{Source: "test", Nodes: []gpu.Node{{Name: "a", GPUs: inv.Nodes[0].GPUs[:1]}}}
	s.setInventory(aOne, nil, now)
	if got := layout(s, "f"); got != "GPU-a0:1 pending=3" {
		t.Fatalf("after losing GPU a1: %s", got)
	}
	s.setInventory(inv, nil, now)
	if got := layout(s, "f"); got != "GPU-a0:1 GPU-a1:1 GPU-b0:1 GPU-b1:1 pending=0" {
		t.Fatalf("nodes back: %s", got)
	}
}

// An update drains every replica and places the new ones afresh
// (lifecycle.Core.Update), even when the slice is unchanged: the drained
// bookings stay until their pods are gone, so old and new pods never
// share a GPU beyond it.
func TestUpdateDrainsAndReplaces(t *testing.T) {
	now := time.Now()
	s := testState(cluster2x2())
	mustDeploy(t, s, spec("f", 50, map[string]string{scheduler.LabelScaleMin: "2"}), now)
	update := func(f scheduler.Function) {
		t.Helper()
		res, err := s.core.Update(f, now)
		if err != nil {
			t.Fatal(err)
		}
		s.apply(res, 0, now)
	}
	same := spec("f", 50, map[string]string{scheduler.LabelScaleMin: "2"})
	same.Deployment.Image = "img:2"
	update(same)
	// a0 still drains the two old replicas: the new ones go to a1.
	if got := layout(s, "f"); got != "GPU-a1:2 pending=0" || len(s.drains) != 1 {
		t.Fatalf("same slice: %s, %d drains; want GPU-a1:2 and a0 draining", got, len(s.drains))
	}
	update(spec("f", 80, map[string]string{scheduler.LabelScaleMin: "2"}))
	if got := layout(s, "f"); got != "GPU-b0:1 GPU-b1:1 pending=0" || len(s.drains) != 2 {
		t.Fatalf("bigger slice: %s, %d drains", got, len(s.drains))
	}
	if _, err := s.core.Update(spec("nope", 10, nil), now); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("update of an unknown function: %v", err)
	}
	if _, err := s.core.Deploy(same, now); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second deploy: %v", err)
	}
}

// restoreState books each Deployment's replicas where its annotation says,
// keeps pods without a Deployment booked as draining, and puts back as
// pending what no longer fits.
func TestRestoreFromTheCluster(t *testing.T) {
	now := time.Now()
	inv := cluster2x2()
	f := spec("f", 50, nil)
	rec, err := renderRecord(f, 3, 8080)
	if err != nil {
		t.Fatal(err)
	}
	rec.CreationTimestamp = metav1.NewTime(now.Add(-time.Hour))
	p := placement("a", "GPU-a0")
	cfg := scheduler.SliceConfig{SMPercent: 50, Batch: 1}
	dep := renderDeployment(groupSpec{Function: f, Name: groupName("f", p, cfg), Placement: p, Config: cfg, Replicas: 2}, renderOptions{})
	// A group on a GPU that is gone, and pods of a deleted group on b0.
	gone := placement("c", "GPU-c0")
	lost := renderDeployment(groupSpec{Function: f, Name: groupName("f", gone, cfg), Placement: gone, Config: cfg, Replicas: 1}, renderOptions{})
	old := placement("b", "GPU-b0")
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "f-old-1", Namespace: "ns",
		Labels: map[string]string{LabelFunction: "f", LabelGroup: "f-old"}, Annotations: placementAnnotations(old, cfg)}}

	s, _ := restoreState(clusterObjects{inventory: inv, records: []*corev1.Service{rec}, deployments: []*appsv1.Deployment{dep, lost}, pods: []*corev1.Pod{pod}}, coreOptions(nil, scheduler.AutoscaleOptions{}), now, nil)
	// The replica whose GPU is gone is placed again at once, best fit:
	// beside the old pod's share on b0.
	if got := layout(s, "f"); got != "GPU-a0:2 GPU-b0:1 pending=0" {
		t.Fatalf("restored %s", got)
	}
	if used := smUsed(s); used["GPU-a0"] != 100 || used["GPU-b0"] != 100 {
		t.Fatalf("bookings %v: want a0 full and b0 held by the old pod and the replaced replica", used)
	}
	if d := s.drains["ns/f-old"]; d == nil || len(d.ids) != 1 {
		t.Fatalf("drains %+v", s.drains)
	}
	if v, _ := s.core.Function("ns/f"); !v.CreatedAt.Equal(rec.CreationTimestamp.UTC()) {
		t.Error("createdAt not from the record")
	}
}

// A group whose Deployment is still being deleted keeps its name: a new
// group on the same GPU and slice gets another, so neither waits for the
// other nor counts the other's pods.
func TestNewGroupAvoidsABusyName(t *testing.T) {
	now := time.Now()
	s := testState(cluster2x2())
	busy := map[string]bool{}
	s.deploymentExists = func(ns, name string) bool { return busy[ns+"/"+name] }
	mustDeploy(t, s, spec("f", 50, nil), now)
	first := s.groupSpecs("ns/f")[0].Name
	res, err := s.core.Delete("ns", "f", now)
	if err != nil {
		t.Fatal(err)
	}
	s.apply(res, 0, now)
	s.checkDrains(func(string, string, int) bool { return true }, now)
	busy["ns/"+first] = true // drained, its deletion under way
	mustDeploy(t, s, spec("f", 50, nil), now)
	mustScale(t, s, "f", 2, now)
	g := s.groupSpecs("ns/f")
	if len(g) != 1 || g[0].Name != first+"-2" || g[0].Replicas != 2 {
		t.Fatalf("groups %+v; want one group %s-2 of 2", g, first)
	}
}

// Pods left on a node that was lost still run when it comes back: their
// shares are booked as draining before the replicas waiting for room are
// placed, so none is placed on a share in use (test/k8s
// TestNodeLossReplacesReplicas saw a GPU at 200 % without this).
func TestNodeBackWithItsPodsHoldsTheirShares(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name   string
		stray  bool
		layout string
		drains int
	}{
		{"its pods gone", false, "GPU-a0:1 GPU-a1:1 GPU-b0:1 GPU-b1:1 pending=0", 0},
		{"one pod still running on b0", true, "GPU-a0:1 GPU-a1:1 GPU-b1:1 pending=1", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := cluster2x2()
			s := testState(inv)
			mustDeploy(t, s, spec("f", 100, map[string]string{scheduler.LabelScaleMin: "4"}), now)
			var onB0 groupSpec
			for _, g := range s.groupSpecs("ns/f") {
				if g.Placement.GPUs[0] == "GPU-b0" {
					onB0 = g
				}
			}
			s.setInventory(gpu.Inventory{Source: "test", Nodes: inv.Nodes[:1]}, nil, now)
			var pods []*corev1.Pod
			if tt.stray {
				p := functionPod("f", onB0.Name, "f-b0-pod", now, time.Second)
				p.Annotations = placementAnnotations(onB0.Placement, onB0.Config)
				pods = append(pods, p)
			}
			s.setInventory(inv, s.strays(pods), now)
			if got := layout(s, "f"); got != tt.layout || len(s.drains) != tt.drains {
				t.Fatalf("node back: %s with %d drains; want %s with %d", got, len(s.drains), tt.layout, tt.drains)
			}
		})
	}
}

// A replica whose booking no longer fits when every booking is made again
// (a GPU's reported memory shrinks below what its replicas hold) is
// stopped by the core with its booking gone, while its pod still runs on
// that GPU: its group drains, and the GPU is held (nothing new starts on
// it) until that pod is gone, as for a warm pod evicted for its memory.
// Before, the Stop of a replica without a booking drained nothing: the
// room the core freed could be given to a new pod beside the old one.
func TestReplicaLostInARebookDrainsItsPod(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		warm bool // g scaled to zero and kept warm, its pod tied to it
	}{
		{"in service", false},
		{"warm, its pod tied", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := gpu.Inventory{Source: "test", Nodes: cluster2x2().Nodes[:1]}
			s := testState(inv)
			mustDeploy(t, s, spec("f", 30, nil), now)
			mustDeploy(t, s, spec("g", 30, map[string]string{scheduler.LabelScaleZero: "true"}), now)
			fg, gg := s.groupSpecs("ns/f"), s.groupSpecs("ns/g")
			if len(fg) != 1 || len(gg) != 1 || fg[0].Placement.GPUs[0] != gg[0].Placement.GPUs[0] {
				t.Fatalf("f %+v and g %+v: want one group each on one GPU", fg, gg)
			}
			shared, old := gg[0].Placement.GPUs[0], gg[0].Name
			gv, _ := s.core.Function("ns/g")
			id := gv.Live[0].ID
			podOf := map[string]string{old: "g-pod"}
			if tt.warm {
				mustScale(t, s, "g", 0, now)
				if v, _ := s.core.Function("ns/g"); len(v.Warm) != 1 {
					t.Fatalf("g scaled to zero: %+v, want one warm replica", v)
				}
				s.warmPod[id] = podOf[old] // the writer has labelled its pod
				s.confirmDemotes(now)
			}

			// The shared GPU now reports 6 GiB: f, the older, keeps its 4 GiB;
			// g's booking no longer fits.
			shrunk := gpu.Inventory{Source: "test", Nodes: []gpu.Node{{Name: "a", GPUs: append([]gpu.Device(nil), inv.Nodes[0].GPUs...)}}}
			for i := range shrunk.Nodes[0].GPUs {
				if shrunk.Nodes[0].GPUs[i].UUID == shared {
					shrunk.Nodes[0].GPUs[i].MemoryBytes = 6 << 30
				}
			}
			s.setInventory(shrunk, nil, now)
			if _, ok := s.core.Replica(id); ok {
				t.Fatalf("g's replica %s still booked on %s after the shrink", id, shared)
			}
			running := map[string]int{old: 1} // g's pod on the shared GPU
			exists := func(_, pod string) bool { return pod == podOf[old] && running[old] > 0 }
			settled := func(_, group string, size int) bool { return running[group] <= size }
			if held := s.heldGPUs(exists); held[shared] == nil {
				t.Fatalf("g's pod still runs on %s, which is not held: %v", shared, held)
			}
			if ended, _ := s.checkDrains(settled, now); len(ended) != 0 {
				t.Fatalf("drains ended while g's pod runs: %+v", ended)
			}
			if held := s.heldGPUs(exists); held[shared] == nil {
				t.Fatalf("%s released while g's pod runs: %v", shared, held)
			}
			running[old] = 0
			s.checkDrains(settled, now)
			if held := s.heldGPUs(exists); held[shared] != nil {
				t.Fatalf("%s still held once g's pod is gone: %v", shared, held)
			}
			if _, draining := s.drains[fnKey("ns", old)]; draining {
				t.Fatalf("g's old group %s still drains once its pod is gone", old)
			}
		})
	}
}
