package scheduler

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// Stats count what a backend did: its placement decisions, replica
// start-ups and model loads since it started (on Kubernetes, since this
// instance took the lead; a standby made none), and the autoscaler's
// actions per function. The backend measures the durations: the scheduler
// has no clock. /metrics exports them.
type Stats struct {
	Decisions Decisions `json:"decisions"`
	// StartupSeconds: from a replica's placement (Kubernetes: its pod's
	// creation) to ready.
	StartupSeconds Histogram `json:"startupSeconds"`
	// ModelLoadSeconds are the model loads whose duration the provider
	// knows, by source (ModelLoadCold, ModelLoadNode); absent where it
	// knows none (a process or pod loads its model unseen).
	ModelLoadSeconds map[string]Histogram `json:"modelLoadSeconds,omitempty"`
	// IdleLoads counts the loads in idle time asked of replicas
	// (lifecycle.LoadModel), by outcome (IdleLoadDone, ...).
	IdleLoads map[string]uint64 `json:"idleLoads,omitempty"`
	// Autoscaler lists the functions the autoscaler manages or changed.
	Autoscaler []ScaleActions `json:"autoscaler"`
}

// Decisions counts Allocator.Place calls by outcome and times them. A
// pending replica is tried again whenever capacity may have freed, and each
// try counts, as kube-scheduler counts its attempts.
type Decisions struct {
	Placed uint64 `json:"placed"`
	// PlacedWithEviction are placements that evicted warm replicas to
	// fit; the replicas evicted count in cache.Stats.ReplicaEvictions.
	PlacedWithEviction uint64 `json:"placedWithEviction"`
	// Pending: the replica fit on no GPU.
	Pending uint64 `json:"pending"`
	// Seconds is the wall time of each Place call.
	Seconds Histogram `json:"seconds"`
}

// ScaleActions counts the autoscaler's decisions a backend applied to one
// function: Up added replicas, Down removed some (to zero included). A
// decision that does both counts in each.
type ScaleActions struct {
	Function  string `json:"function"`
	Namespace string `json:"namespace"`
	Up        uint64 `json:"up"`
	Down      uint64 `json:"down"`
}

// Model load sources of Stats.ModelLoadSeconds.
const (
	// ModelLoadCold: a cache miss, loaded from storage.
	ModelLoadCold = "cold"
	// ModelLoadNode: from the node tier (host memory or local disk).
	ModelLoadNode = "node"
)

// Outcomes of a load in idle time, Stats.IdleLoads.
const (
	// IdleLoadDone: the replica loaded the model.
	IdleLoadDone = "loaded"
	// IdleLoadNoRoom: it had no room without evicting (507).
	IdleLoadNoRoom = "no_room"
	// IdleLoadNotSpoken: it does not take loads; it is asked no more.
	IdleLoadNotSpoken = "not_spoken"
	// IdleLoadFailed: any other answer, or none.
	IdleLoadFailed = "failed"
)

// Histogram counts observations, in seconds, into fixed buckets: the shape
// Prometheus exports. Its holder guards it.
type Histogram struct {
	// Bounds are the buckets' upper bounds, ascending.
	Bounds []float64 `json:"bounds"`
	// Counts[i] is how many observations were at most Bounds[i]: cumulative,
	// as Prometheus has them.
	Counts []uint64 `json:"counts"`
	Count  uint64   `json:"count"`
	Sum    float64  `json:"sum"`
}

// Buckets for Place calls (1 µs to 100 ms: a lock and a scan of the GPUs)
// and for start-ups and model loads (10 ms to 5 min: an emulated load in a
// test to a large model pulled cold).
var (
	decisionBounds = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1}
	loadBounds     = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: slices.Clone(bounds), Counts: make([]uint64, len(bounds))}
}

// Observe counts one observation of d.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	for i := sort.SearchFloat64s(h.Bounds, s); i < len(h.Counts); i++ {
		h.Counts[i]++
	}
	h.Count++
	h.Sum += s
}

// Buckets maps each upper bound to its cumulative count, as
// prometheus.MustNewConstHistogram takes them.
func (h Histogram) Buckets() map[float64]uint64 {
	out := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		out[b] = h.Counts[i]
	}
	return out
}

// clone is a copy that shares nothing with h.
func (h Histogram) clone() Histogram {
	h.Bounds, h.Counts = slices.Clone(h.Bounds), slices.Clone(h.Counts)
	return h
}

// StatsRecorder keeps a backend's Stats but the autoscaler's actions
// (those live with each function). It is safe for concurrent use: start-ups
// and model loads end outside the backend's lock.
type StatsRecorder struct {
	mu        sync.Mutex
	decisions Decisions
	startup   Histogram
	loads     map[string]*Histogram
	idleLoads map[string]uint64
}

// NewStatsRecorder starts with nothing counted.
func NewStatsRecorder() *StatsRecorder {
	return &StatsRecorder{decisions: Decisions{Seconds: newHistogram(decisionBounds)}, startup: newHistogram(loadBounds), loads: map[string]*Histogram{}, idleLoads: map[string]uint64{}}
}

// Placed counts one Place call that returned evicted and err after took.
func (r *StatsRecorder) Placed(evicted []string, err error, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.decisions.Pending++
	case len(evicted) > 0:
		r.decisions.PlacedWithEviction++
	default:
		r.decisions.Placed++
	}
	r.decisions.Seconds.Observe(took)
}

// Started counts a replica that became ready d after its placement.
func (r *StatsRecorder) Started(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.startup.Observe(d)
}

// Loaded counts a model load of d from source (ModelLoadCold,
// ModelLoadNode).
func (r *StatsRecorder) Loaded(source string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.loads[source]
	if !ok {
		nh := newHistogram(loadBounds)
		h = &nh
		r.loads[source] = h
	}
	h.Observe(d)
}

// IdleLoaded counts a load in idle time asked of a replica, by outcome
// (IdleLoadDone, IdleLoadNoRoom, IdleLoadNotSpoken, IdleLoadFailed).
func (r *StatsRecorder) IdleLoaded(outcome string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idleLoads[outcome]++
}

// Stats is a copy of the counts; the backend adds Autoscaler.
func (r *StatsRecorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Stats{Decisions: r.decisions, StartupSeconds: r.startup.clone(), Autoscaler: []ScaleActions{}}
	s.Decisions.Seconds = r.decisions.Seconds.clone()
	if len(r.idleLoads) > 0 {
		s.IdleLoads = make(map[string]uint64, len(r.idleLoads))
		for o, n := range r.idleLoads {
			s.IdleLoads[o] = n
		}
	}
	if len(r.loads) > 0 {
		s.ModelLoadSeconds = make(map[string]Histogram, len(r.loads))
		for src, h := range r.loads {
			s.ModelLoadSeconds[src] = h.clone()
		}
	}
	return s
}
