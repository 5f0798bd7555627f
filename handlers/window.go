package handlers

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// The window is the last minute, as windowSlots sub-windows of windowSlot:
// old observations leave it 10 s at a time, so it covers between 50 and
// 60 s of the past.
const (
	windowSlots = 6
	windowSlot  = 10 * time.Second
	windowSpan  = windowSlots * windowSlot
)

// Latency buckets are log-spaced, bucketsPerOctave to a doubling, from
// bucketFloor up: 26 octaves reach about 11 minutes, beyond any read
// timeout. The first bucket also takes everything faster than bucketFloor,
// the last everything slower than its lower edge.
const (
	bucketsPerOctave = 8
	windowBuckets    = 26 * bucketsPerOctave
	bucketFloor      = 10 * time.Microsecond
)

// latencyWindow keeps, per function, the last minute of the proxy's
// observations, for people: the GPU map and /system/gpus. Prometheus has
// the whole history in the proxy's histogram; this answers "how is it
// doing now" without a Prometheus server.
//
// Memory is fixed per function: windowSlots sub-windows of windowBuckets
// uint32 counters and a few totals, about 5 KiB, allocated once when the
// function is first invoked. Recording allocates nothing. A function with
// no request for a whole window is dropped, so deleted functions do not
// stay forever.
type latencyWindow struct {
	now    func() time.Time
	origin time.Time
	// mu guards the map. Observers hold it for reading while they update
	// a series, so a sweep (which holds it for writing) never drops a
	// series under an observer, losing its request.
	mu     sync.RWMutex
	series map[windowKey]*windowSeries
	// swept is the sub-window of the last sweep: one per sub-window.
	swept atomic.Int64
}

type windowKey struct{ ns, name string }

type windowSeries struct {
	mu    sync.Mutex
	last  int64 // the sub-window of the latest observation
	slots [windowSlots]windowSubWindow
}

// windowSubWindow is one sub-window: a histogram with its totals. epoch
// says which sub-window since origin it holds; a slot whose epoch is out of
// the window counts for nothing and is reset when next written.
type windowSubWindow struct {
	epoch             int64
	count, violations uint32
	sum, min, max     time.Duration
	buckets           [windowBuckets]uint32
}

// newLatencyWindow takes its clock from now (time.Now outside tests).
func newLatencyWindow(now func() time.Time) *latencyWindow {
	return &latencyWindow{now: now, origin: now(), series: map[windowKey]*windowSeries{}}
}

// epoch is the number of the sub-window t falls in, counted from origin
// (on the monotonic clock when t has one, so wall-clock steps do not
// scramble the window).
func (w *latencyWindow) epoch(t time.Time) int64 {
	return max(int64(t.Sub(w.origin)/windowSlot), 0)
}

// observe records one request of a function that took d; violated says
// it missed the function's SLO.
func (w *latencyWindow) observe(ns, name string, d time.Duration, violated bool) {
	e := w.epoch(w.now())
	w.sweepBefore(e)
	b := bucketOf(d)
	k := windowKey{ns, name}
	w.mu.RLock()
	s := w.series[k]
	if s != nil {
		s.record(e, b, d, violated)
		w.mu.RUnlock()
		return
	}
	w.mu.RUnlock()
	w.mu.Lock()
	if s = w.series[k]; s == nil {
		s = &windowSeries{}
		w.series[k] = s
	}
	s.record(e, b, d, violated)
	w.mu.Unlock()
}

func (s *windowSeries) record(e int64, b int, d time.Duration, violated bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sw := &s.slots[e%windowSlots]
	if sw.epoch > e {
		return // read the clock a whole window before a newer observer: out of the window anyway
	}
	if sw.epoch != e || sw.count == 0 {
		*sw = windowSubWindow{epoch: e, min: d, max: d}
	}
	sw.count++
	if violated {
		sw.violations++
	}
	sw.sum += d
	sw.min, sw.max = min(sw.min, d), max(sw.max, d)
	sw.buckets[b]++
	s.last = max(s.last, e)
}

// sweepBefore drops, once per sub-window, the functions without a request
// in the window that ends with sub-window e.
func (w *latencyWindow) sweepBefore(e int64) {
	prev := w.swept.Load()
	if e <= prev || !w.swept.CompareAndSwap(prev, e) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, s := range w.series {
		if s.last <= e-windowSlots {
			delete(w.series, k)
		}
	}
}

// bucketOf is the bucket d falls in: floor(bucketsPerOctave·log2(d/floor)),
// clamped to the first and last bucket.
func bucketOf(d time.Duration) int {
	if d <= bucketFloor {
		return 0
	}
	i := int(bucketsPerOctave * math.Log2(float64(d)/float64(bucketFloor)))
	return min(max(i, 0), windowBuckets-1)
}

// bucketEdges are bucket i's bounds; the first starts at 0 and the last
// never ends (the caller clamps both to what was observed).
func bucketEdges(i int) (lo, hi float64) {
	lo = float64(bucketFloor) * math.Exp2(float64(i)/bucketsPerOctave)
	hi = float64(bucketFloor) * math.Exp2(float64(i+1)/bucketsPerOctave)
	if i == 0 {
		lo = 0
	}
	if i == windowBuckets-1 {
		hi = math.Inf(1)
	}
	return lo, hi
}

// measured sums the function's sub-windows still in the window. ok is
// false when it had no request in that time. slo, when positive, is the
// function's SLO: the violation fields are filled only then.
//
// p50 and p95 are interpolated linearly inside the bucket that holds the
// quantile's observation (nearest rank), within the smallest and largest
// observation. The exact quantile lies in the same bucket, so the estimate
// is within one bucket's width of it: at most 2^(1/8)-1 ≈ 9.05 % off
// (below 10 µs and above 10 min, bounded by the observed extremes instead).
func (w *latencyWindow) measured(ns, name string, slo time.Duration) (scheduler.MeasuredLatency, bool) {
	now := w.now()
	e := w.epoch(now)
	w.sweepBefore(e)

	var (
		buckets     [windowBuckets]uint32
		n, violated uint64
		sum         time.Duration
		lo, hi      time.Duration
	)
	w.mu.RLock()
	s := w.series[windowKey{ns, name}]
	if s != nil {
		s.mu.Lock()
		for i := range s.slots {
			sw := &s.slots[i]
			if sw.count == 0 || sw.epoch <= e-windowSlots || sw.epoch > e {
				continue
			}
			if n == 0 {
				lo, hi = sw.min, sw.max
			}
			n += uint64(sw.count)
			violated += uint64(sw.violations)
			sum += sw.sum
			lo, hi = min(lo, sw.min), max(hi, sw.max)
			for j, c := range sw.buckets {
				buckets[j] += c
			}
		}
		s.mu.Unlock()
	}
	w.mu.RUnlock()
	if n == 0 {
		return scheduler.MeasuredLatency{}, false
	}

	// The window starts with the oldest sub-window still in it, or when
	// the window was created if that is later.
	start := w.origin.Add(time.Duration(max(e-windowSlots+1, 0)) * windowSlot)
	span := max(now.Sub(start), time.Second) // a rate over less is noise
	quantile := func(q float64) float64 {
		rank := q * float64(n)
		cum := 0.0
		for i, c := range buckets {
			if c == 0 {
				continue
			}
			if cum+float64(c) >= rank {
				bl, bh := bucketEdges(i)
				bl, bh = max(bl, float64(lo)), min(bh, float64(hi))
				return bl + (bh-bl)*(rank-cum)/float64(c)
			}
			cum += float64(c)
		}
		return float64(hi)
	}
	ms := func(nanos float64) float64 { return math.Round(nanos/1e3) / 1e3 } // to the microsecond
	m := scheduler.MeasuredLatency{
		WindowSeconds: math.Round(span.Seconds()*10) / 10,
		Requests:      int(n),
		Rate:          math.Round(float64(n)/span.Seconds()*1000) / 1000,
		P50Ms:         ms(quantile(0.50)),
		P95Ms:         ms(quantile(0.95)),
		MeanMs:        ms(float64(sum) / float64(n)),
	}
	if slo > 0 {
		v := int(violated)
		r := float64(violated) / float64(n)
		m.SLOMs = ms(float64(slo))
		m.SLOViolations, m.SLOViolationRatio = &v, &r
	}
	return m, true
}

// size is how many functions the window holds (for tests).
func (w *latencyWindow) size() int {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return len(w.series)
}
