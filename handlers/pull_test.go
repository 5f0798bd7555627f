package handlers

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

// listResolver serves one function from a list of replicas the test
// changes as it goes, as a backend's route changes when replicas start.
type listResolver struct {
	mu  sync.Mutex
	eps []scheduler.Endpoint
	slo time.Duration
}

func (r *listResolver) Route(ns, name, _ string) (scheduler.Route, error) {
	eps, err := r.Replicas(ns, name)
	return scheduler.Route{Endpoints: eps, SLO: r.slo}, err
}

func (r *listResolver) Replicas(string, string) ([]scheduler.Endpoint, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]scheduler.Endpoint(nil), r.eps...), nil
}

func (r *listResolver) add(ep scheduler.Endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eps = append(r.eps, ep)
}

func (*listResolver) Holds(string, string) bool { return false }

// newGate is a channel closed by the returned func, which may be called
// again: a test also calls it in a cleanup registered after its servers,
// so that a failed test does not hang closing them.
func newGate() (<-chan struct{}, func()) {
	c := make(chan struct{})
	var once sync.Once
	return c, func() { once.Do(func() { close(c) }) }
}

// gatedReplica answers once gate is closed, saying which replica it is.
func gatedReplica(t *testing.T, id string, gate <-chan struct{}) scheduler.Endpoint {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-gate
		w.Header().Set(HeaderReplica, id)
		io.WriteString(w, id)
	}))
	t.Cleanup(srv.Close)
	return scheduler.Endpoint{ID: id, URL: srv.URL, InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}
}

func proxyServer(t *testing.T, res ReplicaResolver, opts ProxyOptions) *httptest.Server {
	r := mux.NewRouter()
	r.HandleFunc("/function/{name}", MakeProxyHandler(res, &Invocations{}, opts, zap.NewNop()))
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	code    int
	replica string
	header  http.Header
}

func invoke(srv *httptest.Server, out chan<- answer) {
	resp, err := srv.Client().Post(srv.URL+"/function/fn", "text/plain", strings.NewReader("x"))
	if err != nil {
		out <- answer{code: -1}
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	out <- answer{code: resp.StatusCode, replica: resp.Header.Get(HeaderReplica), header: resp.Header}
}

// waitQueued waits until n requests of fn wait in the book.
func waitQueued(t *testing.T, book *LoadBook, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, _, q := book.Load(DefaultNamespace, "fn"); q == n {
			return
		}
		if time.Now().After(deadline) {
			_, _, q := book.Load(DefaultNamespace, "fn")
			t.Fatalf("%d requests queued, want %d", q, n)
		}
	}
}

// TestProxyNewReplicaTakesTheQueue: the one replica (batch 1) is busy, so
// the requests after it wait in the proxy, not at the replica; a replica
// that starts then takes them, while the first is still busy. (Pushed by
// count, they would all have gone to the first replica and waited for it.)
func TestProxyNewReplicaTakesTheQueue(t *testing.T) {
	gateA, openA := newGate()
	gateB, openB := newGate()
	res := &listResolver{eps: []scheduler.Endpoint{gatedReplica(t, "A", gateA)}}
	book := NewLoadBook()
	reg := prometheus.NewRegistry()
	m := NewProxyMetrics(reg)
	srv := proxyServer(t, res, ProxyOptions{Timeout: 10 * time.Second, Load: book, Metrics: m})
	t.Cleanup(openA)
	t.Cleanup(openB)

	out := make(chan answer, 3)
	go invoke(srv, out)
	for res.eps[0].InFlight.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	go invoke(srv, out)
	go invoke(srv, out)
	waitQueued(t, book, 2)
	if got := testutil.ToFloat64(m.queueLen.WithLabelValues("fn", DefaultNamespace)); got != 2 {
		t.Errorf("faas_gpu_queue_length %v, want 2", got)
	}
	b := gatedReplica(t, "B", gateB)
	b.Batch = 2
	res.add(b)
	openB()
	for range 2 {
		if a := <-out; a.code != http.StatusOK || a.replica != "B" {
			t.Fatalf("a queued request got %d from %q, want 200 from B (A still busy)", a.code, a.replica)
		}
	}
	openA()
	if a := <-out; a.code != http.StatusOK || a.replica != "A" {
		t.Fatalf("the first request got %d from %q, want 200 from A", a.code, a.replica)
	}
	waitQueued(t, book, 0)
	if got := testutil.ToFloat64(m.queueLen.WithLabelValues("fn", DefaultNamespace)); got != 0 {
		t.Errorf("faas_gpu_queue_length %v after the queue drained, want 0", got)
	}
	if got := testutil.CollectAndCount(m.queueWait, "faas_gpu_queue_wait_seconds"); got != 1 {
		t.Errorf("faas_gpu_queue_wait_seconds: %d series, want 1", got)
	}
	ml, ok := m.Measured(DefaultNamespace, "fn", 0)
	if !ok || ml.QueueWaitP95Ms <= 0 {
		t.Errorf("measured %+v: want the queued requests' wait", ml)
	}
}

// TestProxyQueueBound: with the queue full, one more request is answered
// 429 at once with a Retry-After of the queue over the replicas' rate,
// and counted as a 429; the queued ones are served.
func TestProxyQueueBound(t *testing.T) {
	tests := []struct {
		name       string
		max        int
		throughput float64
		wantRetry  string
	}{
		{"one waits, 2 req/s", 1, 2, "1"},
		{"three wait, 0.5 req/s", 3, 0.5, "6"},
		{"speed not known", 2, 0, "1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gate, open := newGate()
			ep := gatedReplica(t, "A", gate)
			ep.Throughput = tt.throughput
			if tt.throughput == 0 {
				ep.Batch = 0 // never held back: hold it with its in-flight count instead
			}
			res := &listResolver{eps: []scheduler.Endpoint{ep}, slo: time.Minute}
			book := NewLoadBook()
			m := NewProxyMetrics(prometheus.NewRegistry())
			srv := proxyServer(t, res, ProxyOptions{Timeout: 10 * time.Second, Load: book, Metrics: m, QueueMax: tt.max})
			t.Cleanup(open)
			out := make(chan answer, tt.max+2)
			if tt.throughput == 0 {
				// A replica of unknown slice queues nothing: nothing
				// is refused either.
				for range tt.max + 1 {
					go invoke(srv, out)
				}
				open()
				for range tt.max + 1 {
					if a := <-out; a.code != http.StatusOK {
						t.Fatalf("status %d, want 200", a.code)
					}
				}
				return
			}
			go invoke(srv, out)
			for ep.InFlight.Load() != 1 {
				time.Sleep(time.Millisecond)
			}
			for i := range tt.max {
				go invoke(srv, out)
				waitQueued(t, book, i+1)
			}
			go invoke(srv, out)
			a := <-out
			if a.code != http.StatusTooManyRequests || a.header.Get("Retry-After") != tt.wantRetry {
				t.Fatalf("over the bound: %d, Retry-After %q; want 429, %q", a.code, a.header.Get("Retry-After"), tt.wantRetry)
			}
			if got := testutil.ToFloat64(m.requests.WithLabelValues("fn", DefaultNamespace, "429", "unknown")); got != 1 {
				t.Errorf("invocations with code 429: %v, want 1", got)
			}
			if got := testutil.ToFloat64(m.violations.WithLabelValues("fn", DefaultNamespace)); got != 1 {
				t.Errorf("SLO violations %v, want 1: a refused request was not served", got)
			}
			open()
			for range tt.max + 1 {
				if a := <-out; a.code != http.StatusOK {
					t.Fatalf("a queued request: %d, want 200", a.code)
				}
			}
		})
	}
}

// TestProxyClientGoneLeavesTheQueue: a queued request whose client goes
// away leaves the queue, and the replica's slot goes to the next one.
func TestProxyClientGoneLeavesTheQueue(t *testing.T) {
	gate, open := newGate()
	ep := gatedReplica(t, "A", gate)
	res := &listResolver{eps: []scheduler.Endpoint{ep}}
	book := NewLoadBook()
	srv := proxyServer(t, res, ProxyOptions{Timeout: 10 * time.Second, Load: book})
	t.Cleanup(open)
	out := make(chan answer, 2)
	go invoke(srv, out)
	for ep.InFlight.Load() != 1 {
		time.Sleep(time.Millisecond)
	}
	// No body: the server sees a connection close only while it reads in
	// the background, which it does once the body is read.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/function/fn", nil)
	gone := make(chan error, 1)
	go func() {
		_, err := srv.Client().Do(req)
		gone <- err
	}()
	waitQueued(t, book, 1)
	cancel()
	<-gone
	waitQueued(t, book, 0)
	go invoke(srv, out)
	waitQueued(t, book, 1)
	open()
	for range 2 {
		if a := <-out; a.code != http.StatusOK {
			t.Fatalf("status %d, want 200", a.code)
		}
	}
	if n := ep.InFlight.Load(); n != 0 {
		t.Fatalf("in flight %d after every request ended, want 0", n)
	}
}
