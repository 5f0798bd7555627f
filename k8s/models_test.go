package k8s

import (
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// What a pod says it holds (docs/replica-protocol.md) replaces the
// assumption that it holds its function's model, for routing; the proxy's
// per-request lookup keeps it, and a pod that said nothing keeps the
// assumption.
func TestPodReportedModelsRoute(t *testing.T) {
	now := time.Now()
	st := testState(cluster2x2())
	mustDeploy(t, st, spec("f", 50, nil), now)
	group := st.groupSpecs("ns/f")[0].Name
	pod := functionPod("f", group, "f-pod", now.Truncate(time.Second).Add(time.Second), 3*time.Second)
	pod.Annotations = map[string]string{AnnotationModel: "m-f"}
	b := fakeBackend(t, pod)
	b.st = st
	route := func(t *testing.T) int {
		t.Helper()
		rt, err := b.Route("ns", "f", "")
		if err != nil || len(rt.Endpoints) != 1 {
			t.Fatalf("route %+v, %v; want the ready pod", rt.Endpoints, err)
		}
		return rt.Endpoints[0].Models
	}
	steps := []struct {
		name         string
		do           func()
		holds, lacks []string
		models       int // the endpoint's model count
	}{
		{"said nothing: its function's model", func() {}, []string{"m-f"}, []string{"other"}, 1},
		{"says two", func() { b.ReplicaModels("f-pod", []string{"other", "m-f"}) }, []string{"other", "m-f"}, nil, 2},
		{"dropped its own", func() { b.ReplicaModels("f-pod", []string{"other"}) }, []string{"other"}, []string{"m-f"}, 1},
		{"holds nothing", func() { b.ReplicaModels("f-pod", nil) }, nil, []string{"other", "m-f"}, 0},
	}
	for _, s := range steps {
		route(t)
		s.do()
		// Routed again: the lookup must not undo what the pod said.
		if got := route(t); got != s.models {
			t.Errorf("%s: endpoint counts %d models, want %d", s.name, got, s.models)
		}
		for _, m := range s.holds {
			if !b.Holds("f-pod", m) {
				t.Errorf("%s: pod does not hold %s", s.name, m)
			}
		}
		for _, m := range s.lacks {
			if b.Holds("f-pod", m) {
				t.Errorf("%s: pod holds %s", s.name, m)
			}
		}
	}
	// A report for a pod never routed to, or gone, is not kept.
	b.ReplicaModels("gone-pod", []string{"x"})
	if _, ok := b.podModel.Load("gone-pod"); ok || b.Holds("gone-pod", "x") {
		t.Fatal("a report for an unknown pod was kept")
	}
}

// Reports and lookups run at once from the proxy's requests.
func TestPodReportedModelsConcurrent(t *testing.T) {
	now := time.Now()
	st := testState(cluster2x2())
	mustDeploy(t, st, spec("f", 50, nil), now)
	group := st.groupSpecs("ns/f")[0].Name
	pod := functionPod("f", group, "f-pod", now.Truncate(time.Second).Add(time.Second), 3*time.Second)
	pod.Annotations = map[string]string{AnnotationModel: "m-f"}
	b := fakeBackend(t, pod)
	b.st = st
	if _, err := b.Route("ns", "f", ""); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 200 {
				b.ReplicaModels("f-pod", []string{"a", "b"}[i%2:])
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				if _, err := b.Route("ns", "f", "a"); err != nil {
					t.Error(err)
					return
				}
				b.Holds("f-pod", "b")
			}
		}()
	}
	wg.Wait()
	if !b.Holds("f-pod", "b") || b.Holds("f-pod", "m-f") {
		t.Fatal("the pod's last reports were lost")
	}
}

// What a pod says it holds reaches the core's model cache under the
// pod's booking, so placement's locality uses it as in local mode: a new
// function serving the model a pod holds goes to that pod's GPU, where
// best fit alone would put it beside the fuller GPU's replica.
func TestPodReportedModelsSteerPlacement(t *testing.T) {
	tests := []struct {
		name string
		told []string // what a's pod says; nil: nothing
		near string   // the function c lands beside
	}{
		{"a's pod says nothing: best fit, beside b", nil, "b"},
		{"a's pod holds vgg16: beside a", []string{"vgg16", "m-a"}, "a"},
		{"a's pod holds other models: beside b", []string{"m-a"}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := time.Now()
			st := testState(cluster2x2())
			// a and b cannot share a GPU (10 GiB each of 16): b, with
			// 60 % SM, leaves its GPU the fuller one.
			mustDeploy(t, st, specMem("a", 20, "10Gi"), now)
			mustDeploy(t, st, specMem("b", 60, "10Gi"), now)
			gpuOf := func(fn string) string {
				t.Helper()
				g := st.groupSpecs("ns/" + fn)
				if len(g) != 1 {
					t.Fatalf("%s: groups %+v, want one", fn, g)
				}
				return g[0].Placement.GPUs[0]
			}
			if gpuOf("a") == gpuOf("b") {
				t.Fatal("a and b share a GPU")
			}
			aGroup := st.groupSpecs("ns/a")[0]
			pod := functionPod("a", aGroup.Name, "a-pod", now.Truncate(time.Second), time.Second)
			pod.Annotations = map[string]string{AnnotationModel: "m-a"}
			b := fakeBackend(t, pod)
			b.st = st
			if rt, err := b.Route("ns", "a", ""); err != nil || len(rt.Endpoints) != 1 {
				t.Fatalf("route a: %+v, %v", rt.Endpoints, err)
			}
			if tt.told != nil {
				b.ReplicaModels("a-pod", tt.told)
			}
			b.mu.Lock()
			b.feedModels(st, now)
			b.mu.Unlock()
			c := specMem("c", 20, "1Gi")
			c.GPU.Model = "vgg16"
			mustDeploy(t, st, c, now)
			if got, want := gpuOf("c"), gpuOf(tt.near); got != want {
				t.Fatalf("c placed on %s, want %s (beside %s)", got, want, tt.near)
			}
		})
	}
}

// A pod's endpoint carries its slice's batch size and throughput from its
// placement annotation, for the proxy's pull dispatch; a pod without a
// readable one has none (the proxy does not hold it back).
func TestPodSliceRoutes(t *testing.T) {
	now := time.Now()
	placed := encodePlacement(scheduler.Placement{Node: "n0", GPUs: []string{"GPU-0"}, Slice: gpu.Slice{SMPercent: 30}},
		scheduler.SliceConfig{SMPercent: 30, Batch: 8, Throughput: 250})
	tests := []struct {
		name       string
		annotation string
		batch      int
		throughput float64
	}{
		{"placed", placed, 8, 250},
		{"no annotation", "", 0, 0},
		{"unreadable", "{", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := testState(cluster2x2())
			mustDeploy(t, st, spec("f", 50, nil), now)
			group := st.groupSpecs("ns/f")[0].Name
			pod := functionPod("f", group, "f-pod", now.Truncate(time.Second).Add(time.Second), 3*time.Second)
			pod.Annotations = map[string]string{AnnotationModel: "m-f"}
			if tt.annotation != "" {
				pod.Annotations[AnnotationPlacement] = tt.annotation
			}
			b := fakeBackend(t, pod)
			b.st = st
			for range 2 { // the second lookup reads what the first decoded
				rt, err := b.Route("ns", "f", "")
				if err != nil || len(rt.Endpoints) != 1 {
					t.Fatalf("route %+v, %v; want the ready pod", rt.Endpoints, err)
				}
				if ep := rt.Endpoints[0]; ep.Batch != tt.batch || ep.Throughput != tt.throughput {
					t.Fatalf("endpoint batch %d, %v req/s; want %d, %v", ep.Batch, ep.Throughput, tt.batch, tt.throughput)
				}
			}
		})
	}
}
