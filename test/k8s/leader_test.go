package k8s

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// Two provider instances on one cluster (an HA install, or one started by
// mistake): only the Lease holder places; the standby refuses changes
// (503 with Retry-After, naming the leader) but answers reads from its informers; when the
// leader dies the standby takes over with the same view and places only
// where room is left. No GPU is oversubscribed at any point.
func TestSecondInstanceCannotDoubleAllocate(t *testing.T) {
	requireNodes(t)
	a := startProvider(t, "leader-a")
	a.leads(t, 10*time.Second)
	b := startProvider(t, "leader-b")
	watchInvariants(t, a, b)

	// Both are asked at once for more than the cluster holds.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[string]map[int]int{"leader-a": {}, "leader-b": {}}
	for i := range 8 {
		for _, p := range []*provider{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("%s-%d", strings.TrimPrefix(p.name, "leader-"), i)
				code, body := p.call(t, http.MethodPost, "/system/functions", fn(name, 40, "4Gi"))
				if code == http.StatusAccepted {
					code, body = p.call(t, http.MethodPost, "/system/scale-function/"+name, types.ScaleServiceRequest{ServiceName: name, Replicas: 3})
				}
				mu.Lock()
				codes[p.name][code]++
				mu.Unlock()
				if p == b && !strings.Contains(string(body), "standby") {
					t.Errorf("standby answered %d %q", code, body)
				}
			}()
		}
	}
	wg.Wait()
	if codes["leader-a"][http.StatusAccepted] != 8 || codes["leader-b"][http.StatusServiceUnavailable] != 8 {
		t.Fatalf("answers: %v; want the leader to accept all 8 and the standby to refuse all 8", codes)
	}

	// The standby reads the cluster: same functions, same GPU view.
	var before string
	if err := poll(10*time.Second, func() bool {
		before = gpuView(a.gpus(t))
		return gpuView(b.gpus(t)) == before && len(listNames(t, b)) == 8
	}); err != nil {
		t.Fatalf("the standby's view differs:\n%s\n--- leader ---\n%s", gpuView(b.gpus(t)), before)
	}
	if st := b.status(t, "a-3"); st.Replicas != 3 {
		t.Errorf("standby status of a-3: %+v", st)
	}

	// The leader dies without releasing the Lease.
	a.stop(t, syscall.SIGKILL)
	start := time.Now()
	b.leads(t, 15*time.Second)
	t.Logf("standby took over %v after the leader was killed (Lease duration 2s)", time.Since(start).Round(time.Millisecond))
	if got := gpuView(b.gpus(t)); got != before {
		t.Fatalf("the new leader's view differs:\n%s\n--- before ---\n%s", got, before)
	}
	// It places now, only where room is left.
	b.deploy(t, fn("b-after", 10, "1Gi"))
	b.scale(t, "b-after", 2)
	if err := poll(30*time.Second, func() bool { st := b.status(t, "b-after"); return st.Replicas == 2 }); err != nil {
		t.Fatal("b-after not scaled")
	}
	// A restarted first instance is now the standby.
	a2 := startProvider(t, "leader-a2")
	time.Sleep(time.Second)
	if code, body := a2.call(t, http.MethodPost, "/system/functions", fn("late", 10, "1Gi")); code != http.StatusServiceUnavailable || !strings.Contains(string(body), "leader-b") {
		t.Errorf("restarted instance: %d %s; want a refusal naming leader-b", code, body)
	}
	// The refusal says when to try again: the Lease's retry period (200ms
	// here), in whole seconds.
	resp, err := a2.http.Post(a2.url+"/system/scale-function/b-after", "application/json", strings.NewReader(`{"serviceName":"b-after","replicas":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Errorf("standby's scale: %d with Retry-After %q; want 503 with 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	cleanUp(t, b)
}

func listNames(t *testing.T, p *provider) []string {
	var list []types.FunctionStatus
	if err := json.Unmarshal(p.must(t, http.StatusOK, http.MethodGet, "/system/functions", nil), &list); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range list {
		out = append(out, f.Name)
	}
	return out
}
