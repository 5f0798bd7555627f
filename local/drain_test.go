package local

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/gorilla/mux"
	"go.uber.org/zap"
)

// stopRecorder is a runner that records when it was stopped, and how
// many requests its replica still held then.
type stopRecorder struct {
	inFlight *atomic.Int64
	heldAt   atomic.Int64 // requests in flight at Stop; -1 before it
}

func (s *stopRecorder) Start() error { return nil }
func (s *stopRecorder) URL() string  { return "" }
func (s *stopRecorder) Ready() bool  { return true }
func (s *stopRecorder) Stop(context.Context) error {
	s.heldAt.Store(s.inFlight.Load())
	return nil
}

// A replica out of routing is stopped only once the requests it was sent
// are done, unless the provider is shutting down: a make-before-break
// move whose old replica is stopped with a request in flight answers 502
// (TestConsolidationMoveLosesNoRequest saw it on a loaded machine).
func TestStopWaitsForRequestsInFlight(t *testing.T) {
	for _, tt := range []struct {
		name     string
		shutdown bool
		wantHeld int64
	}{
		{"a request in flight finishes first", false, 0},
		{"shutting down cuts it", true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var inFlight atomic.Int64
			inFlight.Store(1)
			run := &stopRecorder{inFlight: &inFlight}
			run.heldAt.Store(-1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.shutdown {
				cancel()
			}
			done := make(chan struct{})
			go func() {
				stopAll(ctx, []stopJob{{run: run, inFlight: &inFlight}})
				close(done)
			}()
			if !tt.shutdown {
				time.Sleep(50 * time.Millisecond)
				if run.heldAt.Load() != -1 {
					t.Fatalf("stopped with the request still in flight")
				}
				inFlight.Add(-1)
			}
			<-done
			if got := run.heldAt.Load(); got != tt.wantHeld {
				t.Fatalf("stopped holding %d requests, want %d", got, tt.wantHeld)
			}
		})
	}
}

// Delete does not wait for a removed function's requests in flight: its
// processes are stopped at once and the request is cut, as before stops
// drained (a DELETE must not hang on the function's slowest request).
func TestDeleteCutsRequestsInFlight(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.Deploy(ctx, parkingSpec(t, "slow", 0, nil)); err != nil {
		t.Fatal(err)
	}
	var eps []scheduler.Endpoint
	eventually(t, 10*time.Second, "slow ready", func() bool {
		eps, _ = readyEndpoints(b, DefaultNamespace, "slow")
		return len(eps) == 1
	})
	r := mux.NewRouter()
	proxy := handlers.MakeProxyHandler(b, &handlers.Invocations{}, handlers.ProxyOptions{Timeout: 30 * time.Second}, zap.NewNop())
	r.HandleFunc("/function/{name}/{params:.*}", proxy)
	srv := httptest.NewServer(r)
	defer srv.Close()

	done := make(chan int, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/function/slow/slow?ms=20000")
		if err != nil {
			done <- -1
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	eventually(t, 10*time.Second, "the request in flight", func() bool { return eps[0].InFlight.Load() > 0 })
	if err := b.Delete(ctx, DefaultNamespace, "slow"); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code == http.StatusOK {
			t.Fatalf("the request in flight answered 200 before Delete returned: Delete waited for it")
		}
	default:
		// Delete returned while the request was in flight; it must now
		// be cut, not served.
		if code := <-done; code == http.StatusOK {
			t.Fatalf("the deleted function's request in flight answered 200, want it cut")
		}
	}
}
