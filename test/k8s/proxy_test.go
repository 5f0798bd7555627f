package k8s

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwok gives pods IPs in 127.10.0.0/16 (see startCluster): loopback
// addresses this test can listen on. So unlike with other kwok set-ups, the
// proxy really reaches a "pod": the test stands in for each pod's watchdog
// on <pod IP>:<function port>.

// fakePods serves, for every Ready pod of a function, a watchdog on the
// pod's IP that answers with the pod's name after delay. It returns the
// servers' hit counts by pod.
func fakePods(t *testing.T, name string, port int, delay time.Duration) map[string]*atomic.Int64 {
	t.Helper()
	return fakePodsBut(t, name, port, delay, nil)
}

// fakePodsBut is fakePods for the pods not in skip (served already).
func fakePodsBut(t *testing.T, name string, port int, delay time.Duration, skip map[string]bool) map[string]*atomic.Int64 {
	t.Helper()
	pods, err := env.client.CoreV1().Pods(fnNS).List(context.Background(), metav1.ListOptions{LabelSelector: "faas_function=" + name})
	if err != nil {
		t.Fatal(err)
	}
	hits := map[string]*atomic.Int64{}
	for _, p := range pods.Items {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || skip[p.Name] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("listen as pod %s: %v", p.Name, err)
		}
		n := new(atomic.Int64)
		hits[p.Name] = n
		podName := p.Name
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.Add(1)
			time.Sleep(delay)
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s %s", podName, r.URL.Path, r.URL.RawQuery, body)
		})}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	return hits
}

// The proxy sends invocations to the function's Ready pods on the
// function port, path and query intact, and spreads concurrent requests
// over them (least outstanding first). /system/gpus reports what it
// measured of them, against the function's SLO, which the pods (300 ms
// each) miss every time.
func TestProxyReachesReadyPods(t *testing.T) {
	requireNodes(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, "proxy", "-k8s-function-port", strconv.Itoa(port))
	p.leads(t, 10*time.Second)
	defer cleanUp(t, p)

	lbl := map[string]string{"com.openfaas.scale.min": "3"}
	f := fn("echo", 20, "1Gi")
	f.Labels = &lbl
	(*f.Annotations)["com.openfaas.gpu.slo"] = "100ms"
	p.deploy(t, f)
	p.ready(t, "echo", 3, 30*time.Second)
	hits := fakePods(t, "echo", port, 300*time.Millisecond)
	if len(hits) != 3 {
		t.Fatalf("%d ready pods with an IP, want 3", len(hits))
	}

	resp, err := http.Post(p.url+"/function/echo/sub/path?x=1", "text/plain", strings.NewReader("hi"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	replica := resp.Header.Get("X-Faas-Gpu-Replica")
	if resp.StatusCode != http.StatusOK || hits[replica] == nil || string(body) != replica+" /sub/path x=1 hi" {
		t.Fatalf("invoke: %d %q from replica %q", resp.StatusCode, body, replica)
	}

	// Three at once, each taking 300 ms: one per pod.
	var wg sync.WaitGroup
	var mu sync.Mutex
	served := map[string]int{}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(p.url + "/function/echo." + fnNS)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			mu.Lock()
			served[resp.Header.Get("X-Faas-Gpu-Replica")]++
			mu.Unlock()
		}()
		time.Sleep(30 * time.Millisecond)
	}
	wg.Wait()
	if len(served) != 3 {
		t.Errorf("3 concurrent requests went to %v, want one per pod", served)
	}

	// The leader's proxy measured the 4 requests, all over the SLO.
	var m *scheduler.MeasuredLatency
	for _, f := range p.gpus(t).Functions {
		if f.Name == "echo" {
			m = f.Measured
		}
	}
	if m == nil || m.Requests != 4 || m.SLOMs != 100 || m.SLOViolations == nil || *m.SLOViolations != 4 || m.P50Ms < 300 {
		t.Errorf("/system/gpus measured %+v for echo, want the 4 requests sent, each of 300 ms or more, all over the 100 ms SLO", m)
	}

	// No ready pod: 503, as the gateway expects before it scales from zero.
	p.scale(t, "echo", 0)
	if err := poll(20*time.Second, func() bool { return p.status(t, "echo").AvailableReplicas == 0 }); err != nil {
		t.Fatal("pods still available at zero replicas")
	}
	resp, err = http.Get(p.url + "/function/echo")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("invoke at zero replicas: %d, want 503", resp.StatusCode)
	}
	if resp, err := http.Get(p.url + "/function/nope"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("invoke of an unknown function: %d, want 404", resp.StatusCode)
		}
	}
}

// startClassify starts a leading provider (name) whose autoscaler runs
// every 250 ms with a 1-s cool-down and whose function pods listen on a
// free port, and deploys classify (resnet50 at a 60-ms SLO), ready with
// one replica; the caller serves its pods there (fakePods). Its functions
// are removed when the test ends.
func startClassify(t *testing.T, name string) (*provider, int) {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, name, "-k8s-function-port", strconv.Itoa(port), "-autoscale-interval", "250ms", "-autoscale-cooldown", "1s")
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	t.Cleanup(func() { cleanUp(t, p) })
	ann := map[string]string{"com.openfaas.gpu.model": "resnet50", "com.openfaas.gpu.slo": "60ms"}
	cl := fn("classify", 0, "")
	cl.Annotations = &ann
	p.deploy(t, cl)
	p.ready(t, "classify", 1, 30*time.Second)
	return p, port
}

// The profile gives an SLO'd function its slice (scheduler.PlanFunction),
// and the autoscaler adds replicas when the rate the proxy sees outgrows
// their profiled throughput, as in local mode; an idle function with
// com.openfaas.scale.zero goes to zero after its zero-duration.
func TestAutoscalerFollowsTheProxiedRate(t *testing.T) {
	requireNodes(t)
	p, port := startClassify(t, "autoscale")
	rep := p.gpus(t)
	if len(rep.Functions) != 1 || !rep.Functions[0].Autoscaled || rep.Functions[0].SMPercent >= 100 || rep.Functions[0].SLO != "60ms" {
		t.Fatalf("plan: %+v; want an autoscaled slice from the resnet50 profile", rep.Functions)
	}
	t.Logf("plan: %d%% SM, batch %d: %s", rep.Functions[0].SMPercent, rep.Functions[0].Batch, rep.Functions[0].Decision)
	fakePods(t, "classify", port, 0)

	// Load until the autoscaler adds replicas (new pods get a watchdog
	// too, so they serve once Ready).
	stop := loadFunction(http.DefaultClient, p.url+"/function/classify", 16, 0)
	start := time.Now()
	err := poll(20*time.Second, func() bool { return p.status(t, "classify").Replicas > 1 })
	took := time.Since(start)
	sent := stop()
	if err != nil {
		t.Fatalf("no scale-up after %d requests in %v: %+v", sent, took, p.gpus(t).Functions)
	}
	t.Logf("scaled up to %d replicas %v into the load (%d requests sent, %.0f req/s)", p.status(t, "classify").Replicas,
		took.Round(time.Millisecond), sent, float64(sent)/took.Seconds())

	// Scale to zero after 2 s idle.
	idle := map[string]string{"com.openfaas.scale.zero": "true", "com.openfaas.scale.zero-duration": "2s"}
	z := fn("sleepy", 10, "1Gi")
	z.Labels = &idle
	p.deploy(t, z)
	p.ready(t, "sleepy", 1, 30*time.Second)
	if err := poll(15*time.Second, func() bool { return p.status(t, "sleepy").Replicas == 0 }); err != nil {
		t.Fatalf("sleepy not scaled to zero: %+v", p.status(t, "sleepy"))
	}
}
