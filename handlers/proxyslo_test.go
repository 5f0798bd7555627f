package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
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

// sloResolver routes each function to one replica URL and knows their
// SLOs, as a backend does.
type sloResolver struct {
	urls map[string]string
	slos map[string]time.Duration
}

func (r sloResolver) Route(ns, name, _ string) (scheduler.Route, error) {
	eps, err := r.Replicas(ns, name)
	return scheduler.Route{Endpoints: eps, SLO: r.slos[name]}, err
}

func (r sloResolver) Replicas(ns, name string) ([]scheduler.Endpoint, error) {
	u, ok := r.urls[name]
	if !ok {
		return nil, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	return []scheduler.Endpoint{{ID: name + "-0", URL: u, InFlight: new(atomic.Int64)}}, nil
}

func (sloResolver) Holds(string, string) bool { return false }

// The proxy counts, per function with an SLO, the invocations slower than
// it and those that failed, against real replicas over HTTP: in its
// metrics, and in the load book the autoscaler reads (LoadBook.SLO).
func TestProxyCountsSLOViolations(t *testing.T) {
	replica := func(h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	// A port nothing listens on: the proxy's own 502.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()

	res := sloResolver{
		urls: map[string]string{
			"slow":    replica(func(w http.ResponseWriter, r *http.Request) { time.Sleep(60 * time.Millisecond) }),
			"fast":    replica(func(w http.ResponseWriter, r *http.Request) {}),
			"broken":  replica(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }),
			"gone":    closed,
			"relaxed": replica(func(w http.ResponseWriter, r *http.Request) { time.Sleep(60 * time.Millisecond) }),
		},
		slos: map[string]time.Duration{"slow": 20 * time.Millisecond, "fast": 5 * time.Second, "broken": 5 * time.Second, "gone": 5 * time.Second},
	}
	reg := prometheus.NewRegistry()
	m := NewProxyMetrics(reg)
	book := NewLoadBook()
	proxy := MakeProxyHandler(res, &Invocations{}, ProxyOptions{Timeout: 10 * time.Second, Metrics: m, Load: book}, zap.NewNop())
	r := mux.NewRouter()
	r.HandleFunc("/function/{name}", proxy)
	srv := httptest.NewServer(r)
	defer srv.Close()

	cases := []struct {
		name       string
		n          int
		code       int
		violations int // of n
		hasSLO     bool
	}{
		{"slow", 3, http.StatusOK, 3, true},
		{"fast", 4, http.StatusOK, 0, true},
		{"broken", 2, http.StatusBadGateway, 2, true},
		{"gone", 2, http.StatusBadGateway, 2, true},
		{"relaxed", 2, http.StatusOK, 0, false}, // slow, but no SLO to miss
	}
	for _, c := range cases {
		for range c.n {
			resp, err := srv.Client().Post(srv.URL+"/function/"+c.name, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.code {
				t.Fatalf("%s: %d, want %d", c.name, resp.StatusCode, c.code)
			}
		}
	}
	for _, c := range cases {
		got, ok := m.Measured(DefaultNamespace, c.name, res.slos[c.name])
		if !ok || got.Requests != c.n {
			t.Errorf("%s: measured %+v, want %d requests", c.name, got, c.n)
			continue
		}
		served, missed := book.SLO(DefaultNamespace, c.name)
		if wantServed := map[bool]int{true: c.n}[c.hasSLO]; int(served) != wantServed || int(missed) != c.violations {
			t.Errorf("%s: load book's SLO counts %d served, %d missed; want %d, %d", c.name, served, missed, wantServed, c.violations)
		}
		if !c.hasSLO {
			if got.SLOViolations != nil {
				t.Errorf("%s has no SLO, yet %d violations", c.name, *got.SLOViolations)
			}
			continue
		}
		if got.SLOViolations == nil || *got.SLOViolations != c.violations {
			t.Errorf("%s: measured %+v, want %d violations", c.name, got, c.violations)
		}
		if v := testutil.ToFloat64(m.violations.WithLabelValues(c.name, DefaultNamespace)); v != float64(c.violations) {
			t.Errorf("%s: faas_gpu_function_slo_violations_total = %v, want %d", c.name, v, c.violations)
		}
	}
	if got, _ := m.Measured(DefaultNamespace, "slow", 0); got.P50Ms < 60 {
		t.Errorf("slow's p50 %.1f ms, below the replica's 60 ms", got.P50Ms)
	}
	// Only functions with an SLO have a violations series.
	if n := testutil.CollectAndCount(reg, "faas_gpu_function_slo_violations_total"); n != 4 {
		t.Errorf("%d violation series, want 4 (one per function with an SLO)", n)
	}
}

type staticReporter scheduler.ClusterReport

func (s staticReporter) GPUReport(context.Context) (scheduler.ClusterReport, error) {
	rep := scheduler.ClusterReport(s)
	rep.Functions = append([]scheduler.FunctionReport(nil), rep.Functions...)
	return rep, nil
}

// /system/gpus carries each function's last minute: requests, rate,
// quantiles and, for functions with an SLO, the violations.
func TestGPUsHandlerMeasured(t *testing.T) {
	clk := newFakeClock()
	m := newProxyMetrics(prometheus.NewRegistry(), clk.now)
	rep := staticReporter{Functions: []scheduler.FunctionReport{
		{Name: "resnet50", Namespace: "openfaas-fn", SLO: "100ms"},
		{Name: "ocr", Namespace: "openfaas-fn"},
		{Name: "idle", Namespace: "openfaas-fn", SLO: "1.5s"},
		{Name: "resnet50", Namespace: "team-b", SLO: "100ms"},
	}}
	// resnet50: 100 requests over 40 s, 1..100 ms, with 5 failures
	// (fast 502s) and nothing above 100 ms.
	for i := 1; i <= 100; i++ {
		code := http.StatusOK
		if i%20 == 0 {
			code = http.StatusBadGateway
		}
		m.observe("openfaas-fn", "resnet50", code, "", time.Duration(i)*time.Millisecond, 100*time.Millisecond)
		if i%25 == 0 {
			clk.advance(10 * time.Second)
		}
	}
	// ocr: 8 slow requests, no SLO.
	for range 8 {
		m.observe("openfaas-fn", "ocr", http.StatusOK, "", 2*time.Second, 0)
	}
	// team-b's resnet50 is another function: 2 requests, both too slow.
	m.observe("team-b", "resnet50", http.StatusOK, "", 300*time.Millisecond, 100*time.Millisecond)
	m.observe("team-b", "resnet50", http.StatusOK, "", 500*time.Millisecond, 100*time.Millisecond)

	srv := httptest.NewServer(MakeGPUsHandler(rep, m))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var got scheduler.ClusterReport
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	byName := map[string]*scheduler.MeasuredLatency{}
	for _, f := range got.Functions {
		byName[f.Name+"."+f.Namespace] = f.Measured
	}

	r := byName["resnet50.openfaas-fn"]
	if r == nil {
		t.Fatalf("resnet50 not measured: %s", raw)
	}
	if r.Requests != 100 || r.WindowSeconds != 40 || r.Rate != 2.5 || *r.SLOViolations != 5 || *r.SLOViolationRatio != 0.05 || r.SLOMs != 100 {
		t.Errorf("resnet50: %+v, want 100 requests over 40 s (2.5 req/s), 5 violations of a 100 ms SLO", r)
	}
	if !within(r.P50Ms, 50, bucketError) || !within(r.P95Ms, 95, bucketError) || r.MeanMs != 50.5 {
		t.Errorf("resnet50: p50 %.3f p95 %.3f mean %.3f ms, want about 50, 95 and 50.5", r.P50Ms, r.P95Ms, r.MeanMs)
	}
	o := byName["ocr.openfaas-fn"]
	if o == nil || o.Requests != 8 || o.P50Ms != 2000 || o.P95Ms != 2000 || o.Rate != 0.2 {
		t.Errorf("ocr: %+v, want 8 requests of 2 s over 40 s", o)
	}
	if b := byName["resnet50.team-b"]; b == nil || b.Requests != 2 || *b.SLOViolations != 2 || *b.SLOViolationRatio != 1 {
		t.Errorf("team-b's resnet50: %+v, want its own 2 requests, both violations", b)
	}
	if byName["idle.openfaas-fn"] != nil {
		t.Errorf("idle function measured: %+v", byName["idle.openfaas-fn"])
	}
	// Without an SLO, no violation fields at all; without requests, no
	// measured field.
	var rawFns struct {
		Functions []map[string]json.RawMessage `json:"functions"`
	}
	_ = json.Unmarshal(raw, &rawFns)
	for _, f := range rawFns.Functions {
		name := string(f["name"])
		switch name {
		case `"ocr"`:
			if strings.Contains(string(f["measured"]), "slo") {
				t.Errorf("ocr has no SLO, yet %s", f["measured"])
			}
		case `"idle"`:
			if _, ok := f["measured"]; ok {
				t.Errorf("idle has measured: %s", f["measured"])
			}
		}
	}

	// A minute later, with no new request, nothing is measured.
	clk.advance(windowSpan)
	resp2, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	raw2, _ := io.ReadAll(resp2.Body)
	if strings.Contains(string(raw2), `"measured"`) {
		t.Errorf("measured a minute after the last request: %s", raw2)
	}
}

// busyResolver has one replica of batch 1, serving a request from
// elsewhere for as long as the test runs, so a request queues for it.
type busyResolver struct {
	sloResolver
	busy scheduler.Endpoint
}

func (r busyResolver) Route(ns, name, _ string) (scheduler.Route, error) {
	eps, err := r.Replicas(ns, name)
	return scheduler.Route{Endpoints: eps, SLO: r.slos[name]}, err
}

func (r busyResolver) Replicas(string, string) ([]scheduler.Endpoint, error) {
	return []scheduler.Endpoint{r.busy}, nil
}

// A request that times out queued for a replica that can start it missed
// its SLO, though no replica ever saw it: it counts as an invocation with
// code 504 and as a violation. So for a request with X-Model and one
// without: the proxy queues both.
func TestProxyCountsAQueueTimeoutAsAViolation(t *testing.T) {
	for _, model := range []string{"tesseract", ""} {
		t.Run("model="+model, func(t *testing.T) { testQueueTimeout(t, model) })
	}
}

func testQueueTimeout(t *testing.T, model string) {
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer replica.Close()
	res := busyResolver{sloResolver: sloResolver{slos: map[string]time.Duration{"ocr": 5 * time.Second}},
		busy: scheduler.Endpoint{ID: "ocr-0", URL: replica.URL, InFlight: new(atomic.Int64), Batch: 1, Throughput: 10}}
	res.busy.InFlight.Store(1)
	reg := prometheus.NewRegistry()
	m := NewProxyMetrics(reg)
	proxy := MakeProxyHandler(res, &Invocations{}, ProxyOptions{Timeout: 100 * time.Millisecond, Metrics: m}, zap.NewNop())
	r := mux.NewRouter()
	r.HandleFunc("/function/{name}", proxy)
	srv := httptest.NewServer(r)
	defer srv.Close()

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/function/ocr", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if model != "" {
		req.Header.Set(HeaderModel, model)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504 after waiting for the busy replica", resp.StatusCode)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("ocr", DefaultNamespace, "504", "unknown")); got != 1 {
		t.Errorf("invocations with code 504: %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.violations.WithLabelValues("ocr", DefaultNamespace)); got != 1 {
		t.Errorf("violations: %v, want 1", got)
	}
	if got, ok := m.Measured(DefaultNamespace, "ocr", 5*time.Second); !ok || got.Requests != 1 || got.SLOViolations == nil || *got.SLOViolations != 1 {
		t.Errorf("measured %+v, want 1 request, 1 violation", got)
	}
}

// Forget drops a function's series and window, and a request that was in
// flight when it happened is not counted when it ends, whether or not the
// name was deployed again meanwhile; one that started after it is.
func TestProxyMetricsForget(t *testing.T) {
	t0 := time.Unix(5000, 0)
	tests := []struct {
		name string
		// started and ended are the request's times, relative to the
		// delete at t0.
		started, ended time.Duration
		counted        bool
	}{
		{"in flight across the delete", -2 * time.Second, time.Second, false},
		{"started as it was deleted", 0, time.Second, false},
		{"started after the delete", time.Millisecond, time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := t0.Add(-time.Second)
			reg := prometheus.NewRegistry()
			m := newProxyMetrics(reg, func() time.Time { return now })
			for _, fn := range []string{"gone", "kept"} {
				m.observe("ns", fn, 200, "hit", 10*time.Millisecond, time.Second)
			}
			now = t0
			m.Forget("ns", "gone")
			if n := testutil.CollectAndCount(reg); n != 3 {
				t.Errorf("after Forget: %d series, want kept's 3", n)
			}
			if _, ok := m.Measured("ns", "gone", time.Second); ok {
				t.Error("after Forget the window still measures gone")
			}
			if _, ok := m.Measured("ns", "kept", time.Second); !ok {
				t.Error("Forget of gone dropped kept's window")
			}

			now = t0.Add(tt.ended)
			m.observe("ns", "gone", 200, "hit", tt.ended-tt.started, time.Second)
			got := testutil.ToFloat64(m.requests.WithLabelValues("gone", "ns", "200", "hit"))
			if want := map[bool]float64{false: 0, true: 1}[tt.counted]; got != want {
				t.Errorf("invocations of gone after the delete: %v, want %v", got, want)
			}
		})
	}
}

// Requests that end while their function is being forgotten either land
// before the Forget, which drops them, or after, which ignores them: no
// series is left behind (and -race sees the observers and Forget share
// their state safely).
func TestProxyMetricsForgetRacesObserve(t *testing.T) {
	at := time.Unix(5000, 0)
	for range 20 {
		reg := prometheus.NewRegistry()
		m := newProxyMetrics(reg, func() time.Time { return at })
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 200 {
					m.observe("ns", "fn", 200, "hit", time.Second, time.Second)
				}
			})
		}
		wg.Go(func() { m.Forget("ns", "fn") })
		wg.Wait()
		if n := testutil.CollectAndCount(reg); n != 0 {
			t.Fatalf("%d series left after Forget", n)
		}
	}
}
