package local

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/gorilla/mux"
	"go.uber.org/zap"
)

// A consolidation move on the local backend, under load through the real
// proxy: the new replica starts on the other GPU while the old one
// serves, the old one goes once the new one answers, the GPU it was on is
// empty, and no request fails on the way.
func TestConsolidationMoveLosesNoRequest(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	// b goes to the second GPU while x fills the first; x goes, and b
	// fits beside a.
	for _, s := range []struct {
		name string
		sm   int
	}{{"a", 60}, {"x", 40}, {"b", 30}} {
		if err := b.Deploy(ctx, fnSpec(s.name, s.sm, 2<<30)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(ctx, DefaultNamespace, "x"); err != nil {
		t.Fatal(err)
	}
	gpuOf := func() map[string]string {
		out := map[string]string{}
		for id, p := range placements(t, b) {
			out[id] = p.GPUs[0]
		}
		return out
	}
	eventually(t, 10*time.Second, "b ready", func() bool {
		eps, _ := readyEndpoints(b, DefaultNamespace, "b")
		return len(eps) == 1
	})
	fv, _ := coreView(b, key(DefaultNamespace, "b"))
	old := fv.Live[0].ID
	from := gpuOf()[old]

	r := mux.NewRouter()
	r.HandleFunc("/function/{name}", handlers.MakeProxyHandler(b, &handlers.Invocations{}, handlers.ProxyOptions{Timeout: 10 * time.Second}, zap.NewNop()))
	srv := httptest.NewServer(r)
	defer srv.Close()
	var (
		mu       sync.Mutex
		failed   []int
		servedBy = map[string]int{}
		stop     = make(chan struct{})
		clients  sync.WaitGroup
	)
	for range 4 { // a few at once, so that some are in flight at each step
		clients.Add(1)
		go func() {
			defer clients.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(srv.URL+"/function/b", "text/plain", nil)
				mu.Lock()
				if err != nil {
					failed = append(failed, -1)
				} else {
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						failed = append(failed, resp.StatusCode)
					}
					servedBy[resp.Header.Get(handlers.HeaderReplica)]++
				}
				mu.Unlock()
			}
		}()
	}

	eventually(t, 10*time.Second, "the old replica serving the clients", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return servedBy[old] > 0
	})
	now := time.Now().Add(2 * time.Minute) // past the deploys' cool-down
	b.Tick(now)
	// The replacement starts beside the old replica; an emulated worker
	// is ready at once, and then it alone is in service: the old one left
	// routing only once it was ready.
	fv, _ = coreView(b, key(DefaultNamespace, "b"))
	var moved string
	for _, r := range fv.Live {
		if r.ID != old {
			moved = r.ID
		}
	}
	if moved == "" || len(fv.Live) > 2 {
		t.Fatalf("after the consolidation pass b's replicas in service are %+v, want a replacement of %s (beside it until ready)", fv.Live, old)
	}
	if to := gpuOf()[moved]; to == from {
		t.Fatalf("the replacement is on %s, the GPU to free", to)
	}
	eventually(t, 10*time.Second, "the replacement ready, alone in service", func() bool {
		v, _ := coreView(b, key(DefaultNamespace, "b"))
		return len(v.Live) == 1 && v.Live[0].ID == moved && v.Live[0].Phase == lifecycle.Ready
	})
	for i := 1; i <= 3; i++ {
		b.Tick(now.Add(time.Duration(i) * time.Second))
		time.Sleep(50 * time.Millisecond) // requests keep coming
	}
	close(stop)
	clients.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(failed) > 0 {
		t.Errorf("%d requests failed during the move: %v", len(failed), failed)
	}
	if servedBy[old] == 0 || servedBy[moved] == 0 {
		t.Errorf("served by %v, want both the old replica %s and its replacement %s", servedBy, old, moved)
	}
	for id, u := range gpuOf() {
		if u == from {
			t.Errorf("%s still booked on %s, the GPU freed", id, from)
		}
	}
	if _, ok := gpuOf()[old]; ok {
		t.Errorf("the old replica %s is still booked", old)
	}
}
