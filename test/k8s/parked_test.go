package k8s

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	labelParked  = "gpu.faas-gpu.dev/parked"
	labelAdopted = "gpu.faas-gpu.dev/adopted"
)

// parkedServer stands in, on a parked pod's IP, for a server that speaks
// the replica protocol's /_/gpu: parked until its hand-over, whose
// settings it keeps.
type parkedServer struct {
	mu     sync.Mutex
	handed map[string]string
	srv    *http.Server
	// served counts the invocations it answered once handed over.
	served int
}

// close stops listening on the pod's IP: kwok gives a later pod the
// address of one deleted.
func (s *parkedServer) close() { _ = s.srv.Close() }

func (s *parkedServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.URL.Path == "/_/gpu" && r.Method == http.MethodGet && s.handed == nil:
		_, _ = w.Write([]byte(`{"parked": true}`))
	case r.URL.Path == "/_/gpu" && r.Method == http.MethodPost && s.handed == nil:
		var body struct {
			Env map[string]string `json:"env"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.handed = body.Env
	case r.URL.Path == "/_/gpu":
		http.NotFound(w, r)
	case s.handed == nil:
		http.Error(w, "parked", http.StatusServiceUnavailable)
	default:
		s.served++
	}
}

func (s *parkedServer) invocations() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

func (s *parkedServer) settings() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handed
}

// serveParked listens as pod on its IP and port.
func serveParked(t *testing.T, pod corev1.Pod, port int) *parkedServer {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("listen as parked pod %s: %v", pod.Name, err)
	}
	s := &parkedServer{}
	s.srv = &http.Server{Handler: s}
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(s.close)
	return s
}

// parkedPods are a function's parked pods that run, not being deleted.
func parkedPods(t *testing.T, name string) []corev1.Pod {
	t.Helper()
	list, err := env.client.CoreV1().Pods(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: labelParked + "=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out
}

// oneParked waits for function name's one parked pod to run and returns
// it.
func oneParked(t *testing.T, name string) corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	if err := poll(20*time.Second, func() bool { pods = parkedPods(t, name); return len(pods) == 1 }); err != nil {
		t.Fatalf("%d parked pods of %s running, want 1", len(pods), name)
	}
	return pods[0]
}

// waitParkedReady waits until /system/gpus counts function name's parked
// pod ready: the provider asked it GET /_/gpu.
func (p *provider) waitParkedReady(t *testing.T, name string) {
	t.Helper()
	if err := poll(20*time.Second, func() bool {
		for _, fr := range p.gpus(t).Functions {
			if fr.Name == name {
				return fr.Parked == 1
			}
		}
		return false
	}); err != nil {
		t.Fatalf("/system/gpus never shows %s's parked pod ready", name)
	}
}

func podEnv(p corev1.Pod) map[string]string {
	e := map[string]string{}
	for _, v := range p.Spec.Containers[0].Env {
		e[v.Name] = v.Value
	}
	return e
}

// With -k8s-parked, a function that asks keeps a pod started ahead on
// its node: out of its Service's selector, with no GPU settings and the
// node's held GPUs visible. The next replica placed there takes it: the
// pod is handed the replica's settings (its GPU by UUID) and adopted into
// the replica's group, whose Deployment does not start a pod for it; a
// new one is parked. A restart books the adopted pod where it runs, and
// deleting the function leaves nothing behind.
func TestParkedPodBecomesTheNextReplica(t *testing.T) {
	requireNodes(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"-k8s-parked", "-k8s-function-port", strconv.Itoa(port)}
	p := startProvider(t, "parked", args...)
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer func() { cleanUp(t, p) }() // the provider started last

	f := fn("parkfn", 30, "4Gi")
	(*f.Annotations)["com.openfaas.gpu.parked"] = "1"
	lbl := map[string]string{"com.openfaas.scale.max": "4"}
	f.Labels = &lbl
	p.deploy(t, f)
	p.ready(t, "parkfn", 1, 20*time.Second)
	first := livePods(t, "parkfn")
	if len(first) != 1 {
		t.Fatalf("%d pods, want 1", len(first))
	}
	firstGPU := first[0].Annotations["gpu.faas-gpu.dev/gpu-uuids"]

	pp := oneParked(t, "parkfn")
	e := podEnv(pp)
	if e["FAAS_GPU_PARKED"] != "1" || e["CUDA_VISIBLE_DEVICES"] != "" || e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "" {
		t.Errorf("parked pod's environment %v; want FAAS_GPU_PARKED=1, CUDA_VISIBLE_DEVICES empty, no MPS share", e)
	}
	if !slices.Contains(strings.Split(e["NVIDIA_VISIBLE_DEVICES"], ","), firstGPU) {
		t.Errorf("parked pod sees %q; want the node's held GPU %s among them", e["NVIDIA_VISIBLE_DEVICES"], firstGPU)
	}
	if pp.Labels["faas_function"] != "" || pp.Spec.NodeName != first[0].Spec.NodeName || len(pp.OwnerReferences) != 1 || pp.OwnerReferences[0].Kind != "Service" {
		t.Errorf("parked pod labels %v, node %s (replica's %s), owners %v; want out of the function's selector, beside its replica, owned by its record",
			pp.Labels, pp.Spec.NodeName, first[0].Spec.NodeName, pp.OwnerReferences)
	}
	srv := serveParked(t, pp, port)
	p.waitParkedReady(t, "parkfn")

	p.scale(t, "parkfn", 2)
	p.ready(t, "parkfn", 2, 30*time.Second)
	got := srv.settings()
	if got == nil {
		t.Fatal("the parked pod was never handed over")
	}
	adopted, err := env.client.CoreV1().Pods(fnNS).Get(context.Background(), pp.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	group := adopted.Labels["gpu.faas-gpu.dev/group"]
	gpu := adopted.Annotations["gpu.faas-gpu.dev/gpu-uuids"]
	if adopted.Labels[labelAdopted] != "true" || adopted.Labels["faas_function"] != "parkfn" || group == "" || adopted.Labels[labelParked] != "" {
		t.Errorf("handed-over pod's labels %v; want adopted into a group of parkfn", adopted.Labels)
	}
	if _, ok := adopted.Labels["pod-template-hash"]; ok {
		t.Error("the adopted pod carries pod-template-hash: its group's ReplicaSet could take it")
	}
	if got["CUDA_VISIBLE_DEVICES"] != gpu || got["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != "30" || got["FAAS_GPU_MODEL"] != "model-parkfn" || got["FAAS_GPU_REPLICA_GROUP"] != group {
		t.Errorf("hand-over settings %v; want CUDA_VISIBLE_DEVICES=%s (its placement), 30 %% SM, its model and group %s", got, gpu, group)
	}
	// Its group's Deployment runs the group's size less the adopted pod.
	pods := livePods(t, "parkfn")
	inGroup := 0
	for _, q := range pods {
		if q.Labels["gpu.faas-gpu.dev/group"] == group {
			inGroup++
		}
	}
	for _, d := range liveDeployments(t, "parkfn") {
		if d.Name == group && int(*d.Spec.Replicas) != inGroup-1 {
			t.Errorf("group %s: Deployment at %d with %d pods, one adopted; want %d", group, *d.Spec.Replicas, inGroup, inGroup-1)
		}
	}
	if len(pods) != 2 {
		t.Errorf("%d pods of parkfn, want 2 (one adopted, none started for the same replica)", len(pods))
	}
	var next []corev1.Pod
	if err := poll(20*time.Second, func() bool { next = parkedPods(t, "parkfn"); return len(next) == 1 && next[0].Name != pp.Name }); err != nil {
		t.Errorf("parked pods %v after the hand-over; want one new", podNames(next))
	}

	// A restart books the adopted pod where it runs: no pod is started
	// or removed for it.
	p.stop(t, syscall.SIGTERM)
	p = startProvider(t, "parked2", args...)
	p.leads(t, 15*time.Second)
	p.ready(t, "parkfn", 2, 30*time.Second)
	time.Sleep(3 * time.Second) // a rebuild that lost it would have acted by now
	if cur, err := env.client.CoreV1().Pods(fnNS).Get(context.Background(), pp.Name, metav1.GetOptions{}); err != nil || cur.DeletionTimestamp != nil {
		t.Errorf("the adopted pod after a restart: %v; want it kept", err)
	}
	if n := len(livePods(t, "parkfn")); n != 2 {
		t.Errorf("%d pods of parkfn after a restart, want 2", n)
	}
	if d := p.gpus(t).Stats.Decisions; d.Placed != 0 {
		t.Errorf("%d replicas placed after a restart; want both booked where they run, none placed again", d.Placed)
	}

	// A replica on a GPU its node's parked pod does not see (opened after
	// the pod started) does not take it: it starts its own pod, and the
	// pod is replaced by one that sees the node's GPUs now.
	w := fn("wholefn", 100, "4Gi")
	(*w.Annotations)["com.openfaas.gpu.parked"] = "1"
	p.deploy(t, w)
	p.ready(t, "wholefn", 1, 20*time.Second)
	wp := oneParked(t, "wholefn")
	wsrv := serveParked(t, wp, port)
	p.waitParkedReady(t, "wholefn")
	p.scale(t, "wholefn", 2)
	p.ready(t, "wholefn", 2, 30*time.Second)
	seen := strings.Split(podEnv(wp)["NVIDIA_VISIBLE_DEVICES"], ",")
	for _, q := range livePods(t, "wholefn") {
		gpu := q.Annotations["gpu.faas-gpu.dev/gpu-uuids"]
		switch {
		case q.Name == wp.Name && !slices.Contains(seen, gpu):
			t.Errorf("parked pod %s (sees %v) adopted for GPU %s", q.Name, seen, gpu)
		case q.Name != wp.Name && q.Spec.NodeName == wp.Spec.NodeName && !slices.Contains(seen, gpu):
			t.Logf("the second replica went to %s on the parked pod's node, which it did not see: started its own pod %s", gpu, q.Name)
			if err := poll(20*time.Second, func() bool {
				next := parkedPods(t, "wholefn")
				return len(next) == 1 && next[0].Name != wp.Name && slices.Contains(strings.Split(podEnv(next[0])["NVIDIA_VISIBLE_DEVICES"], ","), gpu)
			}); err != nil {
				t.Errorf("wholefn's parked pods %v; want %s replaced by one that sees %s", podNames(parkedPods(t, "wholefn")), wp.Name, gpu)
			}
		}
	}
	wsrv.close()
	p.remove(t, "wholefn")

	// A server that answers GET /_/gpu as one that does not know the path
	// cannot be parked: its parked pod goes and none is parked again.
	g := fn("plainfn", 20, "2Gi")
	(*g.Annotations)["com.openfaas.gpu.parked"] = "1"
	p.deploy(t, g)
	p.ready(t, "plainfn", 1, 20*time.Second)
	plain := oneParked(t, "plainfn")
	l, err := net.Listen("tcp", net.JoinHostPort(plain.Status.PodIP, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	notFound := &http.Server{Handler: http.NotFoundHandler()}
	go func() { _ = notFound.Serve(l) }()
	t.Cleanup(func() { _ = notFound.Close() })
	var refused string
	if err := poll(20*time.Second, func() bool {
		for _, fr := range p.gpus(t).Functions {
			if fr.Name == "plainfn" {
				refused = fr.ParkedRefused
			}
		}
		return refused != "" && len(parkedPods(t, "plainfn")) == 0
	}); err != nil {
		t.Errorf("plainfn: parkedRefused %q, %d parked pods; want a refusal and none", refused, len(parkedPods(t, "plainfn")))
	}
	time.Sleep(2 * time.Second) // ticks that would park again
	if n := len(parkedPods(t, "plainfn")); n != 0 {
		t.Errorf("%d plainfn pods parked again after its refusal, want 0", n)
	}
	// The refused pod is gone and its IP free: the cluster may give it to
	// the next parked pod, which the test serves on the same port.
	_ = notFound.Close()

	// With -k8s-parked-sees all a parked pod sees every GPU of its node,
	// so a replica on a GPU opened after it started takes it too.
	p.stop(t, syscall.SIGTERM)
	p = startProvider(t, "parked3", append(args, "-k8s-parked-sees", "all")...)
	p.leads(t, 15*time.Second)
	a := fn("allfn", 100, "4Gi")
	(*a.Annotations)["com.openfaas.gpu.parked"] = "1"
	p.deploy(t, a)
	p.ready(t, "allfn", 1, 20*time.Second)
	ap := oneParked(t, "allfn")
	if v := podEnv(ap)["NVIDIA_VISIBLE_DEVICES"]; v != "all" {
		t.Errorf("parked pod with -k8s-parked-sees all sees %q, want all", v)
	}
	asrv := serveParked(t, ap, port)
	p.waitParkedReady(t, "allfn")
	p.scale(t, "allfn", 2)
	p.ready(t, "allfn", 2, 30*time.Second)
	taken, err := env.client.CoreV1().Pods(fnNS).Get(context.Background(), ap.Name, metav1.GetOptions{})
	if err != nil || taken.Labels[labelAdopted] != "true" || asrv.settings()["CUDA_VISIBLE_DEVICES"] != taken.Annotations["gpu.faas-gpu.dev/gpu-uuids"] {
		t.Errorf("allfn's parked pod after a scale to 2: %v, labels %v, handed %v; want it adopted for its whole GPU", err, taken.Labels, asrv.settings())
	}
	asrv.close()
	p.remove(t, "allfn")

	// Scaled down to one, the group keeps one pod; removed, nothing stays.
	p.scale(t, "parkfn", 1)
	p.ready(t, "parkfn", 1, 30*time.Second)
	p.remove(t, "parkfn")
	if err := poll(30*time.Second, func() bool {
		left, _ := env.client.CoreV1().Pods(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: labelParked + "=parkfn"})
		return len(livePods(t, "parkfn")) == 0 && len(left.Items) == 0
	}); err != nil {
		t.Errorf("pods left after the function was removed: %v", podNames(livePods(t, "parkfn")))
	}
}

// A standby (an autoscaled function with traffic keeps one) that takes a
// parked pod is out of routing from its adoption on: the pod is labelled
// warm in the same write that makes it its group's, is tied to the
// standby, and takes no invocation while the load goes on.
func TestParkedPodBecomesAStandby(t *testing.T) {
	requireNodes(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, "parked-standby", "-k8s-parked", "-k8s-function-port", strconv.Itoa(port), "-autoscale-interval", "250ms", "-autoscale-cooldown", "1s")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	t.Cleanup(func() { cleanUp(t, p) })
	ann := map[string]string{"com.openfaas.gpu.model": "resnet50", "com.openfaas.gpu.slo": "60ms", "com.openfaas.gpu.parked": "1"}
	f := fn("sbfn", 0, "")
	f.Annotations = &ann
	p.deploy(t, f)
	p.ready(t, "sbfn", 1, 30*time.Second)
	fakePods(t, "sbfn", port, 0)
	pp := oneParked(t, "sbfn")
	srv := serveParked(t, pp, port)
	p.waitParkedReady(t, "sbfn")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if resp, err := http.Get(p.url + "/function/sbfn"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			time.Sleep(200 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-done }()
	var got *corev1.Pod
	if err := poll(30*time.Second, func() bool {
		got, err = env.client.CoreV1().Pods(fnNS).Get(context.Background(), pp.Name, metav1.GetOptions{})
		return err == nil && got.Labels[labelAdopted] == "true"
	}); err != nil {
		t.Fatalf("the parked pod was never adopted under a light load (a standby takes it): labels %v", got.Labels)
	}
	if got.Labels[labelWarm] != "true" {
		t.Errorf("the standby's adopted pod is labelled %v; want it warm (out of routing) from its adoption", got.Labels)
	}
	time.Sleep(3 * time.Second) // invocations go on meanwhile
	if n := srv.invocations(); n != 0 {
		t.Errorf("the standby's pod answered %d invocations; want none while it is a standby", n)
	}
	standby := false
	for _, n := range p.gpus(t).Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				standby = standby || r.Function == "sbfn" && r.Idle && r.ID == pp.Name
			}
		}
	}
	if !standby {
		t.Errorf("/system/gpus does not show %s as sbfn's idle replica", pp.Name)
	}
}
