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
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// serveEveryPod answers, on the function port of every loopback address,
// as any pod of the test's functions would: kwok gives pods loopback IPs
// (see fakePods), so one listener on all addresses is the watchdog of
// every pod from the moment it has an IP, also of those made later.
func serveEveryPod(t *testing.T, port int) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "ok")
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// memorySharePercent is the share of the largest GPU that function
// name's memory books, as the provider reports both: a slice's cost is
// the larger of its SM % and this (the autoscaler's and the resize's).
func memorySharePercent(t *testing.T, r scheduler.ClusterReport, name string) float64 {
	t.Helper()
	var largest int64
	for _, n := range r.Nodes {
		for _, g := range n.GPUs {
			largest = max(largest, g.MemoryBytes)
		}
	}
	for _, f := range r.Functions {
		if f.Name == name && largest > 0 {
			return 100 * float64(f.MemoryBytes) / float64(largest)
		}
	}
	t.Fatalf("no memory share of %s in the report: %+v", name, r)
	return 0
}

// resizable reports whether a replica at sm % could be resized to a
// cheaper slice: one that saves scheduler.ResizeMinSaving of its cost,
// which no slice costing its memory's share can where sm less that saving
// is below the share.
func resizable(sm int, memoryShare float64) bool {
	return float64(sm)*(1-scheduler.ResizeMinSaving) >= memoryShare
}

// servingGroups are the Deployments of a function with pods wanted, by
// name, with their SM %.
func servingGroups(t *testing.T, name string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range liveDeployments(t, name) {
		if *d.Spec.Replicas > 0 {
			sm, _ := strconv.Atoi(d.Annotations["gpu.faas-gpu.dev/sm-percent"])
			out[d.Name] = sm
		}
	}
	return out
}

// TestResizeMakeBeforeBreakOnKubernetes: after a burst, the autoscaler
// resizes the function's one replica to a smaller slice (scheduler.Resize)
// on the real API server: a new Deployment (another slice is another
// group), whose pod serves once Ready; only then does the old replica
// leave routing and its Deployment go. A steady client is answered 200
// throughout, never 503 for want of a ready replica. Without the backend
// telling the core its pods are ready, no resize ever started here.
func TestResizeMakeBeforeBreakOnKubernetes(t *testing.T) {
	requireNodes(t)
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, "resize", append([]string{"-k8s-function-port", strconv.Itoa(port),
		"-autoscale-interval", "250ms", "-autoscale-cooldown", "1s"}, shortWarm...)...)
	p.leads(t, 10*time.Second)
	watchInvariants(t, p)
	defer cleanUp(t, p)
	serveEveryPod(t, port)

	ann := map[string]string{"com.openfaas.gpu.model": "resnet50", "com.openfaas.gpu.slo": "200ms"}
	rn := fn("rn", 0, "")
	rn.Annotations = &ann
	p.deploy(t, rn)
	p.ready(t, "rn", 1, 30*time.Second)

	// A steady client, 20 req/s, for the whole test; what it got after
	// the burst is checked.
	type answer struct {
		code    int
		replica string
		at      time.Time
	}
	var mu sync.Mutex
	var answers []answer
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Stopped before it is waited for, also when the test fails.
	defer wg.Wait()
	defer stop()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			a := answer{at: time.Now()}
			resp, err := http.Get(p.url + "/function/rn")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				a.code, a.replica = resp.StatusCode, resp.Header.Get("X-Faas-Gpu-Replica")
			}
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()

	// A burst until the autoscaler adds replicas, and a second more; then
	// back to one replica in one Deployment. The scale-downs keep the
	// replicas that serve the most per cost, and those may be a slice
	// added in the burst that is already resnet50's cheapest: its 1.6 GiB
	// of a 16-GiB V100 cost as much as a 10 % slice, so no smaller slice
	// saves anything (seen once in CI, on two busy cores). So a burst is
	// run again until the replica kept is larger, at most three times.
	share := memorySharePercent(t, p.gpus(t), "rn")
	var calm time.Time
	var old string
	var oldSM int
	for attempt := 1; !resizable(oldSM, share); attempt++ {
		if attempt > 3 {
			t.Fatalf("after %d bursts the replica kept is %s (%d%% SM), its memory's %.1f%% leaves nothing cheaper to resize to", attempt-1, old, oldSM, share)
		}
		endBurst := loadFunction(http.DefaultClient, p.url+"/function/rn", 16, 0)
		err = poll(20*time.Second, func() bool { return p.status(t, "rn").Replicas > 1 })
		time.Sleep(time.Second)
		endBurst()
		if err != nil {
			t.Fatalf("no scale-up in burst %d: %+v", attempt, p.gpus(t).Functions)
		}
		calm = time.Now()
		var before map[string]int
		if err := poll(30*time.Second, func() bool {
			before = servingGroups(t, "rn")
			st := p.status(t, "rn")
			return len(before) == 1 && st.Replicas == 1 && st.AvailableReplicas == 1
		}); err != nil {
			t.Fatalf("not back to one replica after burst %d: %v, %+v", attempt, before, p.status(t, "rn"))
		}
		for name, sm := range before {
			old, oldSM = name, sm
		}
		if !resizable(oldSM, share) {
			t.Logf("burst %d kept %s at %d%% SM, with nothing cheaper beside its memory's %.1f%%; another burst", attempt, old, oldSM, share)
		}
	}

	// Then a resize of it to a smaller slice in another, complete: the
	// new pod ready, the old Deployment gone.
	var now map[string]int
	var newer string
	if err := poll(60*time.Second, func() bool {
		now = servingGroups(t, "rn")
		st := p.status(t, "rn")
		if len(now) != 1 || st.Replicas != 1 || st.AvailableReplicas != 1 {
			return false
		}
		for name, sm := range now {
			newer = name
			return name != old && sm < oldSM
		}
		return false
	}); err != nil {
		t.Fatalf("no resize of %s (%d%%) completed: Deployments %v, %+v", old, oldSM, now, p.gpus(t).Functions)
	}
	resized := time.Now()
	if out := p.out.String(); !strings.Contains(out, "resize: ") || !strings.Contains(out, "replacement ready: the replica it replaces leaves") {
		t.Errorf("no resize, or no replacement ready, logged; the new Deployment %s came another way", newer)
	}
	// Drained (its pod gone), the old Deployment is deleted.
	if err := poll(10*time.Second, func() bool {
		for _, d := range liveDeployments(t, "rn") {
			if d.Name == old {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatalf("the old Deployment %s is still there: %v", old, groups(t, "rn"))
	}
	newPods := map[string]bool{}
	for _, pod := range livePods(t, "rn") {
		if pod.Labels["gpu.faas-gpu.dev/group"] == newer {
			newPods[pod.Name] = true
		}
	}
	// The steady client now reaches the new pod.
	var last answer
	if err := poll(10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		last = answers[len(answers)-1]
		return last.at.After(resized) && newPods[last.replica]
	}); err != nil {
		t.Fatalf("after the resize the function answered %d from %q; want the new pod of %s %v", last.code, last.replica, newer, newPods)
	}
	stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var n int
	for _, a := range answers {
		if a.at.Before(calm) {
			continue
		}
		n++
		if a.code != http.StatusOK {
			t.Errorf("at %v after the burst: %d from %q; want every request answered", a.at.Sub(calm).Round(time.Millisecond), a.code, a.replica)
		}
	}
	t.Logf("%s (%d%% SM) replaced by %s (%d%%) %v after the burst; %d requests of the steady client since, all answered",
		old, oldSM, newer, now[newer], resized.Sub(calm).Round(time.Millisecond), n)
}
