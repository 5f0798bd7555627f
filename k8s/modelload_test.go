package k8s

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
)

// What a pod says its model loads took shows on its replica in
// /system/gpus; a pod never routed to is not kept.
func TestPodModelLoadTimesReachTheReport(t *testing.T) {
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
	b.ReplicaModelLoads("gone-pod", map[string]float64{"x": 1})
	b.ReplicaModelLoads("f-pod", map[string]float64{"m-f": 2.5})
	loads := map[string]map[string]float64{}
	for _, n := range b.report(st).Nodes {
		for _, g := range n.GPUs {
			for _, rr := range g.Replicas {
				loads[rr.ID] = rr.ModelLoadSeconds
			}
		}
	}
	if want := map[string]map[string]float64{"f-pod": {"m-f": 2.5}}; !reflect.DeepEqual(loads, want) {
		t.Errorf("load times by replica = %v, want %v", loads, want)
	}
}

// A load the core asks of a booking (lifecycle.LoadModel) is sent to the
// pod paired with it as POST /_/models; the pod's answer reaches the
// core's cache under that booking, as a pod's word does. A pod that does
// not take loads is not asked again.
func TestModelLoadsReachTheBookingsPod(t *testing.T) {
	tests := []struct {
		name    string
		status  int  // the pod's answer to the load
		holds   bool // the booking holds the model after
		noLoads bool
		outcome string // counted (faas_gpu_idle_model_loads_total)
	}{
		{"the pod loads it", http.StatusOK, true, false, scheduler.IdleLoadDone},
		{"no room in the pod", http.StatusInsufficientStorage, false, false, scheduler.IdleLoadNoRoom},
		{"the pod does not speak", http.StatusNotFound, false, true, scheduler.IdleLoadNotSpoken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var asked atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost || r.URL.Path != "/_/models" {
					http.NotFound(w, r)
					return
				}
				var ask struct {
					Model string `json:"model"`
				}
				_ = json.NewDecoder(r.Body).Decode(&ask)
				asked.Add(1)
				if tt.status != http.StatusOK {
					http.Error(w, "no", tt.status)
					return
				}
				_, _ = w.Write([]byte(`{"models": [{"name": "m-f"}, {"name": "` + ask.Model + `", "loadSeconds": 1.5}]}`))
			}))
			defer srv.Close()
			host, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
			p, _ := strconv.Atoi(port)

			now := time.Now()
			st := testState(cluster2x2())
			mustDeploy(t, st, spec("f", 50, nil), now)
			group := st.groupSpecs("ns/f")[0].Name
			pod := functionPod("f", group, "f-pod", now.Truncate(time.Second).Add(-time.Minute), time.Second)
			pod.Status.PodIP = host
			pod.Spec.Containers = []corev1.Container{{Name: "f", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(p)}}}}
			pod.Annotations = map[string]string{AnnotationModel: "m-f"}
			b := fakeBackend(t, pod)
			b.st = st
			if _, err := b.Route("ns", "f", ""); err != nil {
				t.Fatal(err)
			}
			v, _ := st.core.Function("ns/f")
			booking := v.Live[0].ID
			send := func() {
				b.mu.Lock()
				st.loads = append(st.loads, lifecycle.Effect{Kind: lifecycle.LoadModel, Function: "ns/f",
					Replica: lifecycle.ReplicaView{ID: booking}, Model: "vgg16"})
				b.sendLoadsLocked(st)
				b.mu.Unlock()
			}
			send()
			deadline := time.Now().Add(5 * time.Second)
			for asked.Load() == 0 || tt.holds && !b.Holds("f-pod", "vgg16") {
				if time.Now().After(deadline) {
					t.Fatalf("asked %d times, pod holds vgg16: %v", asked.Load(), b.Holds("f-pod", "vgg16"))
				}
				time.Sleep(5 * time.Millisecond)
			}
			if tt.noLoads {
				for _, no := b.takesNoLoads.Load(pod.UID); !no; _, no = b.takesNoLoads.Load(pod.UID) {
					if time.Now().After(deadline) {
						t.Fatal("a pod that does not speak is still asked")
					}
					time.Sleep(5 * time.Millisecond)
				}
				send()
				time.Sleep(50 * time.Millisecond)
				if n := asked.Load(); n != 1 {
					t.Fatalf("asked %d times, want once", n)
				}
				b.podDeleted(pod)
				if _, kept := b.takesNoLoads.Load(pod.UID); kept {
					t.Fatal("a deleted pod's refusal of loads is still kept")
				}
			}
			for st.stats.Stats().IdleLoads[tt.outcome] == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("idle loads counted %v, want one %s", st.stats.Stats().IdleLoads, tt.outcome)
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.mu.Lock()
			b.feedModels(st, now)
			b.mu.Unlock()
			if got := st.core.Cache().Holds(booking, "vgg16"); got != tt.holds {
				t.Errorf("the booking's cache holds vgg16: %v, want %v", got, tt.holds)
			}
			if tt.holds && b.modelLoadsOf("f-pod")["vgg16"] != 1.5 {
				t.Errorf("load times %v, want vgg16's 1.5 s", b.modelLoadsOf("f-pod"))
			}
		})
	}
}

// The proxy weighs a busy holder against a load by the model's profiled
// load time (handlers.ModelLoadTimer): the cluster's product's, where the
// loop has seen one; none without profiles.
func TestModelLoadSecondsFromProfiles(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	b := fakeBackend(t)
	if got := b.ModelLoadSeconds("resnet50"); got != 0 {
		t.Errorf("without profiles: %v s, want 0", got)
	}
	b.cfg.Profiles = store
	product := gpu.V100Product
	b.product.Store(&product)
	prof, _, _ := store.Lookup("resnet50", product)
	if got := b.ModelLoadSeconds("resnet50"); got <= 0 || got != prof.LoadTime.Seconds() {
		t.Errorf("resnet50: %v s, want its profile's %v", got, prof.LoadTime.Seconds())
	}
	if got := b.ModelLoadSeconds("no-such-model"); got != 0 {
		t.Errorf("an unprofiled model: %v s, want 0", got)
	}
}
