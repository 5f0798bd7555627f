package profiler

import (
	"math"
	"slices"
	"sync"
	"time"
)

// Stats summarises one measured phase.
type Stats struct {
	// InFlight is how many requests were kept in flight.
	InFlight int
	// Requests answered with 2xx in the window; Errors the others.
	Requests, Errors int
	// Window is how long the recorded part lasted (warm-up excluded).
	Window time.Duration
	// Percentiles of the latency of the successful requests.
	P50, P90, P99 time.Duration
	// Throughput is Requests per second of Window.
	Throughput float64
	// LastError is the last failure's message, "" without errors.
	LastError string
}

// Percentile is the nearest-rank p-th percentile (0 < p ≤ 100) of sorted
// latencies: the smallest value that at least p % of them do not exceed.
// It is always one of the measured values, never an interpolation between
// two. An empty slice gives 0.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// recorder collects latencies from concurrent workers.
type recorder struct {
	mu        sync.Mutex
	latencies []time.Duration
	errors    int
	lastError string
}

func (r *recorder) ok(d time.Duration) {
	r.mu.Lock()
	r.latencies = append(r.latencies, d)
	r.mu.Unlock()
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	r.errors++
	r.lastError = err.Error()
	r.mu.Unlock()
}

// snapshot is the count and median so far, for progress lines.
func (r *recorder) snapshot() (n, errors int, p50 time.Duration) {
	r.mu.Lock()
	sorted := slices.Clone(r.latencies)
	errors = r.errors
	r.mu.Unlock()
	slices.Sort(sorted)
	return len(sorted), errors, Percentile(sorted, 50)
}

// stats summarises what was recorded over window.
func (r *recorder) stats(inFlight int, window time.Duration) Stats {
	r.mu.Lock()
	sorted := slices.Clone(r.latencies)
	s := Stats{InFlight: inFlight, Requests: len(sorted), Errors: r.errors, Window: window, LastError: r.lastError}
	r.mu.Unlock()
	slices.Sort(sorted)
	s.P50, s.P90, s.P99 = Percentile(sorted, 50), Percentile(sorted, 90), Percentile(sorted, 99)
	if window > 0 {
		s.Throughput = float64(s.Requests) / window.Seconds()
	}
	return s
}
