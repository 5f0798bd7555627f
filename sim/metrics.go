package sim

import (
	"math"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
)

// Sample is one point of a run's time series.
type Sample struct {
	At time.Duration
	// GPUsUsed hold at least one replica (serving, starting or warm);
	// GPUsActive at least one in service.
	GPUsUsed, GPUsActive int
	// SMAllocated is the SM x time share allocated to replicas in service,
	// in % of the cluster's GPUs.
	SMAllocated float64
	// Throughput and Offered are completions and arrivals per second since
	// the previous sample.
	Throughput, Offered float64
	// SLOArrived counts the measured requests of functions with an SLO
	// that arrived since the previous sample; SLOMissed those of them that
	// missed it or never finished. They are counted by arrival, not by
	// completion, so that a run's misses can be traced to the load that
	// caused them (a burst's first seconds, the start of an on period).
	SLOArrived, SLOMissed int
}

// collector accumulates one run's measurements.
type collector struct {
	gpus int
	// counters the engine keeps current
	used, active, busy int
	alloc              int // sum over GPUs of min(alloc, fullShare)
	// their integrals over time (count x ns)
	usedInt, activeInt, busyInt, allocInt float64
	last                                  time.Duration
	peakUsed                              int

	completed      int       // measured requests completed
	perFn          []fnStats // latencies of completed requests by function
	sloRequests    int       // completed requests with an SLO
	sloViolations  int
	inWindow       int // completions between the warmup and the end of the load
	hits, nodeHits int // requests whose model was in GPU memory, on the node
	misses         int
	coldLoads      int // model loads from storage
	nodeLoads      int // model loads the node had recently
	series         []Sample
	sinceDone      int
	sinceArrived   int
	lastSample     time.Duration
	// sloArrived and sloMet count measured SLO requests by the second
	// of their arrival.
	sloArrived, sloMet []int32
	wall               time.Duration
	events             uint64
}

// fnStats are one function's request measurements.
type fnStats struct {
	completed, violations int
	latencies             []float32
}

func (c *collector) init(e *Engine) {
	c.gpus = len(e.gpus)
	c.perFn = make([]fnStats, len(e.wl.Functions))
	if n := len(e.wl.Arrivals); n > 0 {
		buckets := int(e.wl.Arrivals[n-1].At/time.Second) + 1
		c.sloArrived, c.sloMet = make([]int32, buckets), make([]int32, buckets)
	}
}

func (c *collector) advance(t time.Duration) {
	if dt := float64(t - c.last); dt > 0 {
		c.usedInt += float64(c.used) * dt
		c.activeInt += float64(c.active) * dt
		c.busyInt += float64(c.busy) * dt
		c.allocInt += float64(c.alloc) * dt
		c.last = t
	}
	c.peakUsed = max(c.peakUsed, c.used)
}

// arrived counts an arrival at time at; measured: it counts against the
// SLO of its function.
func (c *collector) arrived(at time.Duration, measured bool) {
	c.sinceArrived++
	if measured {
		c.sloArrived[at/time.Second]++
	}
}

// complete records a measured request that arrived at arrival and took lat.
func (c *collector) complete(fn int, arrival, lat, slo time.Duration) {
	v := float32(float64(lat) / float64(time.Millisecond))
	c.completed++
	f := &c.perFn[fn]
	f.completed++
	f.latencies = append(f.latencies, v)
	if slo > 0 {
		c.sloRequests++
		if lat > slo {
			c.sloViolations++
			f.violations++
		} else {
			c.sloMet[arrival/time.Second]++
		}
	}
}

// served counts k requests by where their model was when they started.
func (c *collector) served(o cache.Outcome, k int) {
	switch o {
	case cache.Hit:
		c.hits += k
	case cache.NodeHit:
		c.nodeHits += k
	default:
		c.misses += k
	}
}

// load counts one model load.
func (c *collector) load(o cache.Outcome) {
	switch o {
	case cache.NodeHit:
		c.nodeLoads++
	case cache.Miss:
		c.coldLoads++
	}
}

func (c *collector) sample(e *Engine) {
	dt := (e.now - c.lastSample).Seconds()
	s := Sample{At: e.now, GPUsUsed: c.used, GPUsActive: c.active,
		SMAllocated: 100 * float64(c.alloc) / float64(fullShare*c.gpus)}
	if dt > 0 {
		s.Throughput, s.Offered = float64(c.sinceDone)/dt, float64(c.sinceArrived)/dt
	}
	if len(c.series) > 0 && c.series[len(c.series)-1].At == e.now {
		c.series[len(c.series)-1] = s
	} else {
		c.series = append(c.series, s)
	}
	c.sinceDone, c.sinceArrived, c.lastSample = 0, 0, e.now
}

// Result is what one policy did with one workload.
type Result struct {
	Policy   string
	Workload string
	// Requests offered; Completed by the end; Unfinished still queued or
	// running when the run stopped (Options.Drain after the load).
	Requests, Completed, Unfinished int
	// Throughput is completions (of any request) per second between the
	// warmup and the end of the offered load: under overload, what the
	// policy sustains.
	Throughput float64
	// Latency of completed requests, arrival to response (queueing, model
	// loads and compute), in ms.
	Mean, P50, P99 float64
	// SLOViolations is the % of requests of functions with an SLO that
	// missed it or did not finish; -1 when no function has an SLO.
	SLOViolations float64
	// GPUsMean and GPUsPeak count GPUs holding any replica; GPUSeconds
	// integrates them over the run, ActiveGPUSeconds only GPUs with a
	// replica in service.
	GPUsMean, GPUsPeak           float64
	GPUSeconds, ActiveGPUSeconds float64
	// SMAllocated is the mean SM x time share allocated to replicas in
	// service, in % of the GPUs used; Util the % of time a used GPU
	// computes (nvidia-smi's utilisation).
	SMAllocated, Util float64
	// HitRatio is the % of requests whose model was in their replica's GPU
	// memory when they started; ColdLoads and NodeLoads count model loads
	// from storage and from the node's recent loads (requests' and new
	// replicas').
	HitRatio             float64
	ColdLoads, NodeLoads int
	// Span is the virtual time simulated.
	Span time.Duration
	// Events processed and the wall time it took.
	Events uint64
	Wall   time.Duration
	Series []Sample
	// Latencies are every completed request's latency (ms), sorted.
	Latencies []float32
	// Functions break the request measurements down by function.
	Functions []FunctionResult
	// sloArrived and sloMet are the measured SLO requests by the second
	// of their arrival, and those that met it.
	sloArrived, sloMet []int32
}

func (c *collector) result(e *Engine) *Result {
	measured, sloTotal := 0, 0
	for _, a := range e.wl.Arrivals {
		if a.At >= e.opts.Warmup {
			measured++
			if e.wl.Functions[a.Fn].SLO > 0 {
				sloTotal++
			}
		}
	}
	r := &Result{Policy: e.name, Workload: e.wl.Name, Requests: measured, Completed: c.completed,
		Span: e.now, Series: c.sloByArrival(), sloArrived: c.sloArrived, sloMet: c.sloMet}
	r.Unfinished = r.Requests - r.Completed
	if window := e.wl.Duration - e.opts.Warmup; window > 0 {
		r.Throughput = float64(c.inWindow) / window.Seconds()
	}
	lat := make([]float32, 0, c.completed)
	for _, f := range c.perFn {
		lat = append(lat, f.latencies...)
	}
	slices.Sort(lat)
	r.Latencies = lat
	r.Mean, r.P50, r.P99 = summarize(lat)
	r.Functions = c.functionResults(e, sloRequests(e))
	// Requests of SLO functions that did not finish missed their SLO.
	r.SLOViolations = -1
	if sloTotal > 0 {
		r.SLOViolations = 100 * float64(c.sloViolations+sloTotal-c.sloRequests) / float64(sloTotal)
	}
	span := float64(e.now)
	if span > 0 {
		r.GPUsMean = c.usedInt / span
		r.GPUSeconds = c.usedInt / float64(time.Second)
		r.ActiveGPUSeconds = c.activeInt / float64(time.Second)
	}
	r.GPUsPeak = float64(c.peakUsed)
	if c.usedInt > 0 {
		r.SMAllocated = 100 * c.allocInt / (fullShare * c.usedInt)
		r.Util = 100 * c.busyInt / c.usedInt
	}
	if served := c.hits + c.nodeHits + c.misses; served > 0 {
		r.HitRatio = 100 * float64(c.hits) / float64(served)
	}
	r.ColdLoads, r.NodeLoads = c.coldLoads, c.nodeLoads
	r.Wall, r.Events = c.wall, c.events
	return r
}

// sloByArrival is the series with each sample's SLO requests by arrival:
// a sample at At takes the seconds that start in [previous At, At), the
// last sample every second left.
func (c *collector) sloByArrival() []Sample {
	out := slices.Clone(c.series)
	b := 0
	for i := range out {
		for ; b < len(c.sloArrived) && (i == len(out)-1 || time.Duration(b)*time.Second < out[i].At); b++ {
			out[i].SLOArrived += int(c.sloArrived[b])
			out[i].SLOMissed += int(c.sloArrived[b] - c.sloMet[b])
		}
	}
	return out
}

// SLOViolationsOutside is SLOViolations of the requests that arrived
// before from or from to on (whole seconds; -1: none has an SLO): what a
// run missed outside a window of its load, such as its first burst.
func (r *Result) SLOViolationsOutside(from, to time.Duration) float64 {
	arrived, missed := 0, 0
	for sec, n := range r.sloArrived {
		if at := time.Duration(sec) * time.Second; at < from || at >= to {
			arrived += int(n)
			missed += int(n - r.sloMet[sec])
		}
	}
	if arrived == 0 {
		return -1
	}
	return 100 * float64(missed) / float64(arrived)
}

// summarize is the mean, median and 99th percentile of sorted latencies.
func summarize(sorted []float32) (mean, p50, p99 float64) {
	n := len(sorted)
	if n == 0 {
		return 0, 0, 0
	}
	sum := 0.0
	for _, v := range sorted {
		sum += float64(v)
	}
	return sum / float64(n), float64(sorted[percentileIndex(n, 0.50)]), float64(sorted[percentileIndex(n, 0.99)])
}

// sloRequests counts each function's measured requests.
func sloRequests(e *Engine) []int {
	out := make([]int, len(e.wl.Functions))
	for _, a := range e.wl.Arrivals {
		if a.At >= e.opts.Warmup {
			out[a.Fn]++
		}
	}
	return out
}

// FunctionResult is one function's share of a Result.
type FunctionResult struct {
	Name, Model         string
	SLO                 time.Duration
	Requests, Completed int
	Mean, P50, P99      float64
	// SLOViolations: % of its requests over the SLO or unfinished (-1: no SLO).
	SLOViolations float64
}

func (c *collector) functionResults(e *Engine, requests []int) []FunctionResult {
	out := make([]FunctionResult, len(c.perFn))
	for i := range c.perFn {
		f := &c.perFn[i]
		slices.Sort(f.latencies)
		fn := e.wl.Functions[i]
		fr := FunctionResult{Name: fn.Name, Model: fn.Model, SLO: fn.SLO, Requests: requests[i], Completed: f.completed, SLOViolations: -1}
		fr.Mean, fr.P50, fr.P99 = summarize(f.latencies)
		if fn.SLO > 0 && fr.Requests > 0 {
			fr.SLOViolations = 100 * float64(f.violations+fr.Requests-fr.Completed) / float64(fr.Requests)
		}
		out[i] = fr
	}
	return out
}

// percentileIndex is the nearest-rank index of quantile q among n sorted
// values.
func percentileIndex(n int, q float64) int {
	i := int(math.Ceil(float64(n)*q)) - 1
	return min(max(i, 0), n-1)
}
