package handlers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ProxyMetrics are the invocation proxy's own measurements.
type ProxyMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewProxyMetrics registers the proxy's metrics with reg.
func NewProxyMetrics(reg prometheus.Registerer) *ProxyMetrics {
	m := &ProxyMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "faas_gpu_invocations_total",
			Help: "Invocations the proxy forwarded, by status code and model-cache outcome (hit, node-hit, miss, unknown).",
		}, []string{"function", "namespace", "code", "cache"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "faas_gpu_invocation_duration_seconds",
			Help:    "Time from the proxy receiving an invocation to the replica's response headers.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"function", "namespace"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

func (m *ProxyMetrics) observe(ns, name, code, cacheOutcome string, d time.Duration) {
	if m == nil {
		return
	}
	if cacheOutcome == "" {
		cacheOutcome = "unknown"
	}
	m.requests.WithLabelValues(name, ns, code, cacheOutcome).Inc()
	m.duration.WithLabelValues(name, ns).Observe(d.Seconds())
}
