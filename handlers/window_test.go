package handlers

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeClock is the window's clock in tests: it moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// bucketError is how far an interpolated quantile may be from the exact
// one: one bucket's width.
var bucketError = math.Exp2(1.0/bucketsPerOctave) - 1

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*want+1e-3 }

func TestWindowQuantiles(t *testing.T) {
	spread := func(n int, step time.Duration) []time.Duration {
		var out []time.Duration
		for i := 1; i <= n; i++ {
			out = append(out, time.Duration(i)*step)
		}
		return out
	}
	repeat := func(n int, d time.Duration) []time.Duration {
		var out []time.Duration
		for range n {
			out = append(out, d)
		}
		return out
	}
	cases := []struct {
		name               string
		durations          []time.Duration
		p50, p95, mean     time.Duration
		exact              bool // all alike: the min/max clamp makes it exact
		wantBucketRelError float64
	}{
		{name: "1..100 ms", durations: spread(100, time.Millisecond), p50: 50 * time.Millisecond, p95: 95 * time.Millisecond, mean: 50500 * time.Microsecond},
		{name: "all 20 ms", durations: repeat(40, 20*time.Millisecond), p50: 20 * time.Millisecond, p95: 20 * time.Millisecond, mean: 20 * time.Millisecond, exact: true},
		{name: "a slow tail", durations: append(repeat(90, 2*time.Millisecond), repeat(10, 400*time.Millisecond)...),
			p50: 2 * time.Millisecond, p95: 400 * time.Millisecond, mean: 41800 * time.Microsecond},
		{name: "under the first bucket", durations: repeat(5, 3*time.Microsecond), p50: 3 * time.Microsecond, p95: 3 * time.Microsecond, mean: 3 * time.Microsecond, exact: true},
		{name: "over the last bucket", durations: repeat(3, 20*time.Minute), p50: 20 * time.Minute, p95: 20 * time.Minute, mean: 20 * time.Minute, exact: true},
		{name: "one request", durations: []time.Duration{7 * time.Millisecond}, p50: 7 * time.Millisecond, p95: 7 * time.Millisecond, mean: 7 * time.Millisecond, exact: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			w := newLatencyWindow(clk.now)
			for _, d := range c.durations {
				w.observe("fn", "f", d, false)
			}
			m, ok := w.measured("fn", "f", 0)
			if !ok || m.Requests != len(c.durations) {
				t.Fatalf("measured = %+v, %v; want %d requests", m, ok, len(c.durations))
			}
			rel := bucketError
			if c.exact {
				rel = 0
			}
			if !within(m.P50Ms, ms(c.p50), rel) || !within(m.P95Ms, ms(c.p95), rel) {
				t.Errorf("p50 %.3f ms, p95 %.3f ms; want %.3f and %.3f within %.1f %%", m.P50Ms, m.P95Ms, ms(c.p50), ms(c.p95), 100*rel)
			}
			if !within(m.MeanMs, ms(c.mean), 0) {
				t.Errorf("mean %.3f ms, want %.3f", m.MeanMs, ms(c.mean))
			}
			if m.SLOViolations != nil || m.SLOViolationRatio != nil || m.SLOMs != 0 {
				t.Errorf("SLO fields without an SLO: %+v", m)
			}
		})
	}
}

// Every bucket's width is the bound the comment on measured gives.
func TestWindowBuckets(t *testing.T) {
	for i := 1; i < windowBuckets-1; i++ {
		lo, hi := bucketEdges(i)
		if r := hi/lo - 1; math.Abs(r-bucketError) > 1e-9 {
			t.Fatalf("bucket %d is %.4f wide, want %.4f", i, r, bucketError)
		}
		if b := bucketOf(time.Duration(lo * 1.001)); b != i {
			t.Fatalf("%v falls in bucket %d, want %d", time.Duration(lo*1.001), b, i)
		}
	}
	if lo, _ := bucketEdges(windowBuckets - 1); time.Duration(lo) < 10*time.Minute {
		t.Errorf("the last bucket starts at %v, below the longest timeout", time.Duration(lo))
	}
}

// ProxyMetrics decide what is a violation: slower than the SLO, or failed;
// without an SLO nothing is.
func TestViolations(t *testing.T) {
	type obs struct {
		code int
		d    time.Duration
	}
	cases := []struct {
		name  string
		slo   time.Duration
		obs   []obs
		viols int
	}{
		{"within the SLO", 100 * time.Millisecond, []obs{{200, 10 * time.Millisecond}, {200, 100 * time.Millisecond}, {404, 20 * time.Millisecond}}, 0},
		{"slower than the SLO", 100 * time.Millisecond, []obs{{200, 101 * time.Millisecond}, {200, 10 * time.Millisecond}, {200, 3 * time.Second}, {200, 50 * time.Millisecond}}, 2},
		{"fast but failed", 100 * time.Millisecond, []obs{{502, time.Millisecond}, {500, time.Millisecond}, {504, time.Second}, {200, time.Millisecond}}, 3},
		{"no SLO", 0, []obs{{200, time.Hour}, {502, time.Millisecond}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := newProxyMetrics(reg, newFakeClock().now)
			for _, o := range c.obs {
				m.observe("openfaas-fn", "f", o.code, "", o.d, c.slo)
			}
			got, ok := m.Measured("openfaas-fn", "f", c.slo)
			if !ok || got.Requests != len(c.obs) {
				t.Fatalf("measured %+v %v, want %d requests", got, ok, len(c.obs))
			}
			series := testutil.CollectAndCount(m.violations)
			if c.slo == 0 {
				if got.SLOViolations != nil || got.SLOViolationRatio != nil || series != 0 {
					t.Errorf("no SLO, yet violations: %+v, %d series", got, series)
				}
				return
			}
			if got.SLOViolations == nil || *got.SLOViolations != c.viols || *got.SLOViolationRatio != float64(c.viols)/float64(len(c.obs)) || got.SLOMs != ms(c.slo) {
				t.Errorf("measured %+v, want %d violations of %d", got, c.viols, len(c.obs))
			}
			if v := testutil.ToFloat64(m.violations.WithLabelValues("f", "openfaas-fn")); v != float64(c.viols) {
				t.Errorf("faas_gpu_function_slo_violations_total = %v, want %d", v, c.viols)
			}
		})
	}
}

// Old sub-windows leave the window 10 s at a time; the rate is over the
// time the window covers.
func TestWindowExpiry(t *testing.T) {
	clk := newFakeClock()
	w := newLatencyWindow(clk.now)
	at := func(d time.Duration) { w.observe("ns", "f", d, d > 50*time.Millisecond) }

	for range 30 {
		at(100 * time.Millisecond) // sub-window 0: slow, all violate
	}
	clk.advance(35 * time.Second)
	for range 10 {
		at(10 * time.Millisecond) // sub-window 3
	}
	steps := []struct {
		advance        time.Duration
		requests       int
		violations     int
		windowSeconds  float64
		p50Ms          float64
		wantNoMeasured bool
	}{
		// 35 s after the start: all of it, over 35 s.
		{0, 40, 30, 35, 100, false},
		// 59.9 s: sub-window 0 is still the oldest of six.
		{24900 * time.Millisecond, 40, 30, 59.9, 100, false},
		// 60 s: it left; 50 s from sub-window 1 on.
		{100 * time.Millisecond, 10, 0, 50, 10, false},
		// 89.9 s: sub-window 3 is the oldest still.
		{29900 * time.Millisecond, 10, 0, 59.9, 10, false},
		// 90 s: nothing left.
		{100 * time.Millisecond, 0, 0, 0, 0, true},
	}
	for i, s := range steps {
		clk.advance(s.advance)
		m, ok := w.measured("ns", "f", 50*time.Millisecond)
		if s.wantNoMeasured {
			if ok {
				t.Errorf("step %d: measured %+v, want nothing", i, m)
			}
			continue
		}
		if !ok || m.Requests != s.requests || *m.SLOViolations != s.violations || m.WindowSeconds != s.windowSeconds ||
			!within(m.P50Ms, s.p50Ms, bucketError) || m.Rate != math.Round(float64(s.requests)/s.windowSeconds*1000)/1000 {
			t.Errorf("step %d: measured %+v (ok %v); want %d requests, %d violations over %.1f s, p50 %.0f ms",
				i, m, ok, s.requests, s.violations, s.windowSeconds, s.p50Ms)
		}
	}

}

// A slot written again a whole window later starts afresh.
func TestWindowReusesSlots(t *testing.T) {
	clk := newFakeClock()
	w := newLatencyWindow(clk.now)
	w.observe("ns", "f", 90*time.Millisecond, true) // sub-window 0, slot 0
	clk.advance(5 * windowSlot)
	w.observe("ns", "f", 30*time.Millisecond, false) // sub-window 5 keeps f
	clk.advance(windowSlot)
	w.observe("ns", "f", 30*time.Millisecond, false) // sub-window 6, slot 0 again
	m, ok := w.measured("ns", "f", 50*time.Millisecond)
	if !ok || m.Requests != 2 || *m.SLOViolations != 0 || m.P95Ms != 30 {
		t.Errorf("measured %+v, want the two recent requests only", m)
	}
}

// Functions without a request for a whole window go, so deleted ones do
// not stay forever.
func TestWindowDropsIdleFunctions(t *testing.T) {
	clk := newFakeClock()
	w := newLatencyWindow(clk.now)
	for i := range 50 {
		w.observe("ns", fmt.Sprintf("gone-%d", i), time.Millisecond, false)
	}
	w.observe("ns", "busy", time.Millisecond, false)
	for range 7 {
		clk.advance(windowSlot)
		w.observe("ns", "busy", time.Millisecond, false)
	}
	if n := w.size(); n != 1 {
		t.Errorf("%d functions kept after a minute without requests, want only busy", n)
	}
	if _, ok := w.measured("ns", "gone-0", 0); ok {
		t.Error("a dropped function still measured")
	}
	// Reading alone sweeps too: nobody may invoke anything again.
	clk.advance(2 * windowSpan)
	if _, ok := w.measured("ns", "busy", 0); ok || w.size() != 0 {
		t.Errorf("after two idle minutes: %d functions kept", w.size())
	}
}

// Recording into a known function allocates nothing.
func TestWindowObserveAllocatesNothing(t *testing.T) {
	clk := newFakeClock()
	w := newLatencyWindow(clk.now)
	w.observe("openfaas-fn", "resnet50", time.Millisecond, false)
	if n := testing.AllocsPerRun(1000, func() {
		w.observe("openfaas-fn", "resnet50", 3*time.Millisecond, true)
	}); n != 0 {
		t.Errorf("observe allocates %.0f times per call", n)
	}
}

// Observers, readers and sweeps at once (run with -race).
func TestWindowConcurrent(t *testing.T) {
	clk := newFakeClock()
	w := newLatencyWindow(clk.now)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				w.observe("ns", fmt.Sprintf("f%d", j%3), time.Duration(i+1)*time.Millisecond, j%2 == 0)
				if j%100 == 0 {
					w.measured("ns", "f0", time.Millisecond)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 20 {
			clk.advance(time.Second) // the sweeps run, dropping nothing
		}
	}()
	wg.Wait()
	total := 0
	for i := range 3 {
		m, _ := w.measured("ns", fmt.Sprintf("f%d", i), 0)
		total += m.Requests
	}
	if total != workers*each {
		t.Errorf("%d requests measured, want %d", total, workers*each)
	}
}
