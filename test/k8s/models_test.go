package k8s

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// protocolPods stands in, on each Ready pod's IP, for a function's
// watchdog; the pods named in speaks hold those models and say so
// (docs/replica-protocol.md: GET /_/models and X-Faas-Gpu-Models), the
// others say nothing (404). It returns the pods' names, sorted.
func protocolPods(t *testing.T, name string, port int, speaks func(pods []string) map[string][]string) []string {
	t.Helper()
	pods := runningPods(t, name)
	names := make([]string, len(pods))
	for i, p := range pods {
		names[i] = p.Name
	}
	held := speaks(names)
	for _, p := range pods {
		l, err := net.Listen("tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen as pod %s: %v", p.Name, err)
		}
		models, speaks := held[p.Name]
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !speaks {
				if r.URL.Path == "/_/models" {
					http.NotFound(w, r)
				}
				return
			}
			w.Header().Set("X-Faas-Gpu-Models", joinModels(models))
			if r.URL.Path == "/_/models" {
				writeModels(w, models)
			}
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return names
}

// runningPods are function name's running pods with an IP, by name.
func runningPods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	list, err := env.client.CoreV1().Pods(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

// writeModels answers a pod stand-in's /_/models: the protocol's list.
func writeModels(w http.ResponseWriter, models []string) {
	type entry struct {
		Name string `json:"name"`
	}
	var body struct {
		Models []entry `json:"models"`
	}
	for _, m := range models {
		body.Models = append(body.Models, entry{m})
	}
	_ = json.NewEncoder(w).Encode(body)
}

func joinModels(ms []string) string {
	out := ""
	for i, m := range ms {
		if i > 0 {
			out += ","
		}
		out += m
	}
	return out
}

// A pod that says it holds a model gets the requests for it, through the
// real API server's pods: the router sends an X-Model request to the pod
// holding the model, the one it would not pick on its own (the free pods
// tie, and the first by name wins a tie). The header never reaches the
// caller.
func TestPodsReportTheirModels(t *testing.T) {
	requireNodes(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, "models", "-k8s-function-port", strconv.Itoa(port))
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)

	lbl := map[string]string{"com.openfaas.scale.min": "2"}
	f := fn("multi", 20, "1Gi")
	f.Labels = &lbl
	p.deploy(t, f)
	p.ready(t, "multi", 2, 30*time.Second)
	var holder string
	pods := protocolPods(t, "multi", port, func(pods []string) map[string][]string {
		if len(pods) != 2 {
			t.Fatalf("%d ready pods with an IP, want 2", len(pods))
		}
		holder = pods[1]
		return map[string][]string{holder: {"vgg16", "model-multi"}}
	})

	invoke := func() string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, p.url+"/function/multi", nil)
		req.Header.Set("X-Model", "vgg16")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("invoke: %d", resp.StatusCode)
		}
		if v := resp.Header.Values("X-Faas-Gpu-Models"); len(v) > 0 {
			t.Fatalf("the caller got X-Faas-Gpu-Models %q", v)
		}
		return resp.Header.Get("X-Faas-Gpu-Replica")
	}
	// The pods are asked when the proxy first sees them, which the first
	// request does; the answer comes back on its own time.
	if err := poll(10*time.Second, func() bool { return invoke() == holder }); err != nil {
		t.Fatalf("requests for vgg16 never went to %s, which holds it (pods %v)", holder, pods)
	}
	for i := range 5 {
		if got := invoke(); got != holder {
			t.Fatalf("request %d for vgg16 went to %s, want %s, which holds it", i, got, holder)
		}
	}
}

// What a pod says it holds steers placement as in local mode: a function
// serving vgg16 is placed on the GPU of the pod that said it holds vgg16,
// where best fit alone would put it beside the other function's fuller
// GPU (k8s.TestPodReportedModelsSteerPlacement has the cases where no pod
// says so).
func TestReportedModelsSteerPlacement(t *testing.T) {
	requireNodes(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, "locality", "-k8s-function-port", strconv.Itoa(port))
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)

	// holder and filler cannot share a GPU (10 GiB each of 16); filler's
	// 60 % SM leaves its GPU the fuller one.
	p.deploy(t, fn("holder", 20, "10Gi"))
	p.deploy(t, fn("filler", 60, "10Gi"))
	p.ready(t, "holder", 1, 30*time.Second)
	p.ready(t, "filler", 1, 30*time.Second)
	gpuOf := func(name string) (string, []string) {
		t.Helper()
		for _, n := range p.gpus(t).Nodes {
			for _, g := range n.GPUs {
				for _, r := range g.Replicas {
					if r.Function == name {
						return g.UUID, r.Models
					}
				}
			}
		}
		return "", nil
	}
	holderGPU, _ := gpuOf("holder")
	fillerGPU, _ := gpuOf("filler")
	if holderGPU == "" || holderGPU == fillerGPU {
		t.Fatalf("holder on %q, filler on %q: want two GPUs", holderGPU, fillerGPU)
	}
	protocolPods(t, "holder", port, func(pods []string) map[string][]string {
		if len(pods) != 1 {
			t.Fatalf("%d ready pods of holder with an IP, want 1", len(pods))
		}
		return map[string][]string{pods[0]: {"vgg16", "model-holder"}}
	})
	// The first request has the proxy ask the pod; the loop then feeds
	// the answer to the core's cache, which /system/gpus shows.
	err = poll(10*time.Second, func() bool {
		req, _ := http.NewRequest(http.MethodPost, p.url+"/function/holder", nil)
		req.Header.Set("X-Model", "vgg16")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		_, models := gpuOf("holder")
		return slices.Contains(models, "vgg16")
	})
	if err != nil {
		t.Fatal("holder's booking never showed the vgg16 its pod holds in /system/gpus")
	}
	near := fn("near", 20, "1Gi")
	(*near.Annotations)["com.openfaas.gpu.model"] = "vgg16"
	p.deploy(t, near)
	var got string
	if err := poll(10*time.Second, func() bool { got, _ = gpuOf("near"); return got != "" }); err != nil {
		t.Fatal("near never placed")
	}
	if got != holderGPU {
		t.Fatalf("near placed on %s, want %s where holder's pod holds vgg16 (filler is on %s)", got, holderGPU, fillerGPU)
	}
}

// A multi-model function's pods are asked to load the models of its mix
// in their idle time (POST /_/models), through the real leader's loop:
// the requests the proxy counts by X-Model make the mix, the core's tick
// places a model in the pod's free room, the loop sends it to the pod,
// and the pod's answer reaches /system/gpus under its booking. The pod
// stand-in holds only what it is asked to load: requests load nothing.
func TestPodsLoadTheMixInIdleTime(t *testing.T) {
	requireNodes(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, "loads", "-k8s-function-port", strconv.Itoa(port))
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)

	ann := map[string]string{"com.openfaas.gpu.model": "alexnet", "com.openfaas.gpu.slo": "2s", "com.openfaas.gpu.memory": "8Gi"}
	lbl := map[string]string{"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"}
	p.deploy(t, types.FunctionDeployment{Service: "zoo", Image: "ghcr.io/example/zoo:1", Annotations: &ann, Labels: &lbl})
	p.ready(t, "zoo", 1, 30*time.Second)

	pods := runningPods(t, "zoo")
	if len(pods) != 1 {
		t.Fatalf("%d running pods of zoo with an IP, want 1", len(pods))
	}
	pod := pods[0]
	var (
		mu     sync.Mutex
		held   = []string{"alexnet"}
		loaded []string
	)
	l, err := net.Listen("tcp", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen as pod %s: %v", pod.Name, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/_/models" && r.Method == http.MethodPost {
			var ask struct {
				Model string `json:"model"`
			}
			if json.NewDecoder(r.Body).Decode(&ask) != nil || ask.Model == "" {
				http.Error(w, "no model", http.StatusBadRequest)
				return
			}
			held = append(held, ask.Model)
			loaded = append(loaded, ask.Model)
		}
		w.Header().Set("X-Faas-Gpu-Models", joinModels(held))
		if r.URL.Path == "/_/models" {
			writeModels(w, held)
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	mix := []string{"alexnet", "resnet18", "mobilenet_v2"}
	bookingModels := func() []string {
		for _, n := range p.gpus(t).Nodes {
			for _, g := range n.GPUs {
				for _, r := range g.Replicas {
					if r.Function == "zoo" {
						return r.Models
					}
				}
			}
		}
		return nil
	}
	err = poll(30*time.Second, func() bool {
		for _, m := range mix {
			req, _ := http.NewRequest(http.MethodPost, p.url+"/function/zoo", nil)
			req.Header.Set("X-Model", m)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		models := bookingModels()
		return slices.Contains(models, "resnet18") && slices.Contains(models, "mobilenet_v2")
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Fatalf("the booking shows %v after the pod was asked to load %v; want the mix placed", bookingModels(), loaded)
	}
	if len(loaded) < 2 || slices.Contains(loaded, "alexnet") {
		t.Errorf("the pod was asked to load %v: want resnet18 and mobilenet_v2, not the model it holds", loaded)
	}
}
