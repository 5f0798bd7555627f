package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// gpuWatch polls GET /system/gpus until stopped and remembers the first
// moment any GPU was oversubscribed.
type gpuWatch struct {
	polls     atomic.Int64
	mu        sync.Mutex
	violation string
	stop      chan struct{}
	done      chan struct{}
}

// watchGPUs starts that many pollers at once, so that reads interleave with
// the deploys at many points.
func watchGPUs(t *testing.T, p *provider, pollers int) *gpuWatch {
	w := &gpuWatch{stop: make(chan struct{}), done: make(chan struct{})}
	var wg sync.WaitGroup
	for range pollers {
		wg.Add(1)
		go w.poll(p, &wg)
	}
	go func() { wg.Wait(); close(w.done) }()
	t.Cleanup(w.halt)
	return w
}

func (w *gpuWatch) poll(p *provider, wg *sync.WaitGroup) {
	defer wg.Done()
	c := newHTTPClient(10 * time.Second)
	defer c.CloseIdleConnections()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		r, err := do(c, http.MethodGet, p.URL+"/system/gpus", nil, &p.Creds, nil)
		var rep gpuReport
		switch {
		case err != nil:
			w.record(fmt.Sprintf("GET /system/gpus failed: %v", err))
		case r.Code != http.StatusOK:
			w.record("GET /system/gpus: " + r.String())
		case json.Unmarshal(r.Body, &rep) != nil:
			w.record("GET /system/gpus: bad JSON " + truncate(string(r.Body), 500))
		default:
			if bad := rep.oversubscribed(); bad != "" {
				w.record(bad)
			}
		}
		w.polls.Add(1)
	}
}

func (w *gpuWatch) record(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.violation == "" {
		w.violation = s
	}
}

func (w *gpuWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check stops the watch and fails the test if it ever saw a GPU
// oversubscribed, or watched too little to tell.
func (w *gpuWatch) check(t *testing.T, minPolls int64) {
	t.Helper()
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.violation != "" {
		t.Errorf("while functions were deployed and removed: %s", w.violation)
	}
	t.Logf("the GPU watch read /system/gpus %d times", w.polls.Load())
	if n := w.polls.Load(); n < minPolls {
		t.Errorf("the GPU watch read /system/gpus only %d times (want ≥ %d): the oversubscription check saw too little", n, minPolls)
	}
}

// split tells placed from pending functions in a /system/gpus report, and
// checks that a function is never both.
func split(t *testing.T, rep gpuReport) (placed, pending []string) {
	t.Helper()
	for id, ps := range rep.placements() {
		if ps[0].Idle {
			t.Errorf("replica %s of %s is idle, but no function here was scaled down", id, ps[0].Function)
		}
		placed = append(placed, ps[0].Function)
	}
	for _, pe := range rep.Pending {
		pending = append(pending, pe.Function)
		if strings.TrimSpace(pe.Reason) == "" {
			t.Errorf("pending replica %s of %s has no reason", pe.ID, pe.Function)
		}
	}
	sort.Strings(placed)
	sort.Strings(pending)
	for _, f := range placed {
		if slices.Contains(pending, f) {
			t.Errorf("%s is both placed and pending", f)
		}
	}
	return placed, pending
}

// TestConcurrentDeploys is issue 2's concurrency test: 50 functions asking
// 30 % SM and 4 GiB each, deployed at once on the built-in two-V100
// inventory. Each GPU fits three (90 %), so exactly 6 run and 44 wait; the
// GPUs are never oversubscribed; removing the running ones lets 6 waiting
// ones start.
func TestConcurrentDeploys(t *testing.T) {
	const n, perGPU = 50, 3
	c := newCreds(t)
	p := startProvider(t, c, t.TempDir(), 0)

	inv := p.gpus(t)
	gpus := inv.allGPUs()
	if len(gpus) != 2 {
		t.Fatalf("want the built-in inventory of 2 GPUs, got %d: %+v", len(gpus), gpus)
	}
	for _, g := range gpus {
		if g.MemoryBytes != 16<<30 || g.SMAllocated != 0 || g.MemoryAllocated != 0 {
			t.Fatalf("want two idle 16 GiB GPUs, got %+v", g)
		}
	}
	places := len(gpus) * perGPU

	watch := watchGPUs(t, p, 4)
	// Deferred, so a violation is reported even when a wait below fails.
	defer watch.check(t, 10)
	names := make([]string, n)
	codes := make([]int, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		names[i] = fmt.Sprintf("fn-%02d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hc := newHTTPClient(30 * time.Second)
			defer hc.CloseIdleConnections()
			body, err := json.Marshal(types.FunctionDeployment{
				Service:     names[i],
				Image:       "example.com/resnet50:1",
				Annotations: &map[string]string{"com.openfaas.gpu.sm": "30", "com.openfaas.gpu.memory": "4Gi", "com.openfaas.gpu.model": "resnet50"},
			})
			if err != nil {
				errs[i] = err
				return
			}
			<-start
			r, err := do(hc, http.MethodPost, p.URL+"/system/functions", body, &c, map[string]string{"Content-Type": "application/json"})
			codes[i], errs[i] = r.Code, err
		}()
	}
	began := time.Now()
	close(start)
	wg.Wait()
	t.Logf("%d parallel deploys took %s", n, time.Since(began).Round(time.Millisecond))
	for i := range n {
		if errs[i] != nil || codes[i] != http.StatusAccepted {
			t.Errorf("deploy %s: want 202, got %d, %v", names[i], codes[i], errs[i])
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Exactly 6 run, 44 wait; the statuses agree with /system/gpus.
	var placed, pending []string
	eventually(t, 20*time.Second, fmt.Sprintf("%d replicas placed and ready, %d pending", places, n-places), func() (bool, string) {
		rep := p.gpus(t)
		placed, pending = split(t, rep)
		ready := 0
		for _, g := range rep.allGPUs() {
			for _, r := range g.Replicas {
				if r.Ready {
					ready++
				}
			}
		}
		return len(placed) == places && len(pending) == n-places && ready == places,
			fmt.Sprintf("placed %d (ready %d), pending %d", len(placed), ready, len(pending))
	})
	for _, g := range p.gpus(t).allGPUs() {
		if len(g.Replicas) != perGPU || g.SMAllocated != 30*perGPU || g.MemoryAllocated != int64(perGPU)*4<<30 {
			t.Errorf("GPU %s: want %d replicas with %d%% and %d GiB booked, got %d replicas, %d%%, %d bytes",
				g.UUID, perGPU, 30*perGPU, 4*perGPU, len(g.Replicas), g.SMAllocated, g.MemoryAllocated)
		}
	}
	checkStatuses(t, p, names, placed)

	// Remove the running functions, in parallel as well: the waiting ones
	// take their place, still never oversubscribing.
	var dwg sync.WaitGroup
	delCodes := make([]int, len(placed))
	for i, name := range placed {
		body := mustJSON(t, types.DeleteFunctionRequest{FunctionName: name, Namespace: defaultNS})
		dwg.Add(1)
		go func() {
			defer dwg.Done()
			hc := newHTTPClient(30 * time.Second)
			defer hc.CloseIdleConnections()
			r, err := do(hc, http.MethodDelete, p.URL+"/system/functions", body, &c, nil)
			if err == nil {
				delCodes[i] = r.Code
			}
		}()
	}
	dwg.Wait()
	for i, name := range placed {
		if delCodes[i] != http.StatusAccepted {
			t.Errorf("delete %s: want 202, got %d", name, delCodes[i])
		}
	}
	removed := placed
	var placed2, pending2 []string
	eventually(t, 20*time.Second, fmt.Sprintf("%d waiting replicas placed after the removals, %d still pending", places, n-2*places), func() (bool, string) {
		rep := p.gpus(t)
		placed2, pending2 = split(t, rep)
		ready := 0
		for _, g := range rep.allGPUs() {
			for _, r := range g.Replicas {
				if r.Ready {
					ready++
				}
			}
		}
		return len(placed2) == places && len(pending2) == n-2*places && ready == places,
			fmt.Sprintf("placed %v (ready %d), pending %d", placed2, ready, len(pending2))
	})
	for _, f := range placed2 {
		if slices.Contains(removed, f) {
			t.Errorf("removed function %s is placed again", f)
		}
		if !slices.Contains(pending, f) {
			t.Errorf("%s was placed after the removals but was not pending before", f)
		}
	}
	var remaining []string
	for _, name := range names {
		if !slices.Contains(removed, name) {
			remaining = append(remaining, name)
		}
	}
	checkStatuses(t, p, remaining, placed2)
	for _, name := range removed {
		if code, _ := p.status(t, defaultNS, name); code != http.StatusNotFound {
			t.Errorf("removed %s: GET /system/function: want 404, got %d", name, code)
		}
	}
}

// checkStatuses compares function statuses with the placed set: every
// function wants 1 replica; exactly the placed ones have it available.
func checkStatuses(t *testing.T, p *provider, names, placed []string) {
	t.Helper()
	fns, err := p.Client.GetFunctions(t.Context(), defaultNS)
	if err != nil {
		t.Fatalf("GetFunctions: %v", err)
	}
	if len(fns) != len(names) {
		t.Errorf("GetFunctions: want %d functions, got %d", len(names), len(fns))
	}
	for _, f := range fns {
		if !slices.Contains(names, f.Name) {
			t.Errorf("GetFunctions lists unexpected %s", f.Name)
			continue
		}
		want := uint64(0)
		if slices.Contains(placed, f.Name) {
			want = 1
		}
		if f.Replicas != 1 || f.AvailableReplicas != want {
			t.Errorf("%s: want replicas 1 and availableReplicas %d, got %d and %d", f.Name, want, f.Replicas, f.AvailableReplicas)
		}
	}
}
