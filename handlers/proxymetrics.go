package handlers

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/prometheus/client_golang/prometheus"
)

// ProxyMetrics are the invocation proxy's own measurements: Prometheus
// series, and the last minute per function for /system/gpus and the page.
//
// It owns every series labelled by function: Forget drops a deleted
// function's, so a function deployed again under its name starts from zero
// and a removed one leaves nothing behind.
type ProxyMetrics struct {
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	violations *prometheus.CounterVec
	queueLen   *prometheus.GaugeVec
	queueWait  *prometheus.HistogramVec
	window     *latencyWindow
	// queueWindow is the last minute of queue waits, as window is of
	// latencies; queued is each function's queue length now.
	queueWindow *latencyWindow
	queuedMu    sync.Mutex
	queued      map[windowKey]int
	now         func() time.Time

	// mu guards deleted. Observers hold it for reading from the check to
	// the record, so a Forget never falls between them and leaves a
	// series behind.
	mu sync.RWMutex
	// deleted is when each function was last forgotten: a request that
	// started before then was for the deleted function, and is not
	// counted against one deployed since under the same name.
	deleted map[windowKey]time.Time
}

// forgetTTL is how long a deletion is remembered, to drop requests that
// were in flight when it happened: far longer than any proxy timeout.
const forgetTTL = time.Hour

// NewProxyMetrics registers the proxy's metrics with reg.
func NewProxyMetrics(reg prometheus.Registerer) *ProxyMetrics {
	return newProxyMetrics(reg, time.Now)
}

// newProxyMetrics takes the recent window's clock from now, so that tests
// move it instead of sleeping.
func newProxyMetrics(reg prometheus.Registerer, now func() time.Time) *ProxyMetrics {
	m := &ProxyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faas_gpu_invocations_total",
			Help: "Invocations the proxy forwarded, those that timed out in its queue (504) and those refused with the queue full (429), by status code and model-cache outcome (hit, node-hit, miss, unknown).",
		}, []string{"function", "namespace", "code", "cache"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "faas_gpu_invocation_duration_seconds",
			Help:    "Time from the proxy receiving an invocation to the replica's response headers.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"function", "namespace"}),
		// A failed request did not meet the SLO whatever its duration: a
		// fast 502 must not look like a fast answer.
		violations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faas_gpu_function_slo_violations_total",
			Help: "Invocations of a function with an SLO that took longer than it (as faas_gpu_invocation_duration_seconds measures), failed with a 5xx or a proxy error, or were refused with a full queue (429).",
		}, []string{"function", "namespace"}),
		queueLen: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "faas_gpu_queue_length",
			Help: "Invocations waiting in the proxy for a replica that can start them.",
		}, []string{"function", "namespace"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "faas_gpu_queue_wait_seconds",
			Help:    "Time an invocation waited in the proxy before it was handed to a replica (0 for one started at once); part of faas_gpu_invocation_duration_seconds.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"function", "namespace"}),
		window:      newLatencyWindow(now),
		queueWindow: newLatencyWindow(now),
		queued:      map[windowKey]int{},
		now:         now,
		deleted:     map[windowKey]time.Time{},
	}
	reg.MustRegister(m.requests, m.duration, m.violations, m.queueLen, m.queueWait)
	return m
}

// sloMissed reports whether an invocation of a function with an SLO
// missed it: slower than it, failed (5xx), or refused with a full queue
// (429), which was not served either.
func sloMissed(code int, d, slo time.Duration) bool {
	return d > slo || code >= 500 || code == http.StatusTooManyRequests
}

// observe records one forwarded invocation: its status code (the replica's,
// or the proxy's 502/504), the model-cache outcome, how long it took and
// the function's SLO (0: none).
func (m *ProxyMetrics) observe(ns, name string, code int, cacheOutcome string, d, slo time.Duration) {
	if m == nil {
		return
	}
	if cacheOutcome == "" {
		cacheOutcome = "unknown"
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if at, ok := m.deleted[windowKey{ns, name}]; ok && !m.now().Add(-d).After(at) {
		return
	}
	m.requests.WithLabelValues(name, ns, strconv.Itoa(code), cacheOutcome).Inc()
	m.duration.WithLabelValues(name, ns).Observe(d.Seconds())
	violated := slo > 0 && sloMissed(code, d, slo)
	if slo > 0 {
		// Created at 0 by the first invocation, so that a ratio over
		// faas_gpu_invocations_total has a series before the first miss.
		c := m.violations.WithLabelValues(name, ns)
		if violated {
			c.Inc()
		}
	}
	m.window.observe(ns, name, d, violated)
}

// observeQueue records how long one invocation waited in the proxy's
// queue before a replica took it.
func (m *ProxyMetrics) observeQueue(ns, name string, d time.Duration) {
	if m == nil {
		return
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if at, ok := m.deleted[windowKey{ns, name}]; ok && !m.now().Add(-d).After(at) {
		return
	}
	m.queueWait.WithLabelValues(name, ns).Observe(d.Seconds())
	m.queueWindow.observe(ns, name, d, false)
}

// setQueued records that n of the function's invocations wait now.
func (m *ProxyMetrics) setQueued(ns, name string, n int) {
	if m == nil {
		return
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	m.queueLen.WithLabelValues(name, ns).Set(float64(n))
	m.queuedMu.Lock()
	if n == 0 {
		delete(m.queued, windowKey{ns, name})
	} else {
		m.queued[windowKey{ns, name}] = n
	}
	m.queuedMu.Unlock()
}

// Forget drops every series and the recent window of a deleted function.
// Requests to it still in flight are not counted when they end.
func (m *ProxyMetrics) Forget(namespace, name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	for k, at := range m.deleted {
		if now.Sub(at) > forgetTTL {
			delete(m.deleted, k)
		}
	}
	m.deleted[windowKey{namespace, name}] = now
	fn := prometheus.Labels{"function": name, "namespace": namespace}
	m.requests.DeletePartialMatch(fn)
	m.duration.DeletePartialMatch(fn)
	m.violations.DeletePartialMatch(fn)
	m.queueLen.DeletePartialMatch(fn)
	m.queueWait.DeletePartialMatch(fn)
	m.window.forget(namespace, name)
	m.queueWindow.forget(namespace, name)
	m.queuedMu.Lock()
	delete(m.queued, windowKey{namespace, name})
	m.queuedMu.Unlock()
}

// forget drops a function's recent window at once rather than when it ages
// out, so a function deployed again does not show the old one's minute.
func (w *latencyWindow) forget(ns, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.series, windowKey{ns, name})
}

// Measured is the function's last minute as the proxy saw it (false: no
// request in that time); slo, when positive, is what the violation share
// is reported against.
func (m *ProxyMetrics) Measured(namespace, name string, slo time.Duration) (scheduler.MeasuredLatency, bool) {
	if m == nil {
		return scheduler.MeasuredLatency{}, false
	}
	ml, ok := m.window.measured(namespace, name, slo)
	if !ok {
		return ml, false
	}
	if q, ok := m.queueWindow.measured(namespace, name, 0); ok {
		ml.QueueWaitP50Ms, ml.QueueWaitP95Ms, ml.QueueWaitMeanMs = q.P50Ms, q.P95Ms, q.MeanMs
	}
	m.queuedMu.Lock()
	ml.Queued = m.queued[windowKey{namespace, name}]
	m.queuedMu.Unlock()
	return ml, true
}
