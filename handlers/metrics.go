package handlers

import (
	"context"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports the GPU view at scrape time, so the numbers are the
// allocator's and the cache's own, never a copy that drifts.
type collector struct {
	rep GPUReporter

	smAllocated, memAllocated, memCapacity, gpuReplicas *prometheus.Desc
	fnReplicas, fnSlice, fnRate, fnSLO, fnParked        *prometheus.Desc
	pending                                             *prometheus.Desc
	cacheHits, cacheNodeHits, cacheMisses, evictions    *prometheus.Desc
	decisions, decisionSeconds, autoscaler              *prometheus.Desc
	startupSeconds, modelLoadSeconds, idleLoads         *prometheus.Desc
	quarantined                                         *prometheus.Desc
}

// quarantineCounter is a backend with a state directory of its own (local
// mode), which sets unreadable records aside rather than refusing to start.
type quarantineCounter interface {
	QuarantinedRecords() uint64
}

// unknownReason labels pending replicas no placement was tried for yet
// (a Kubernetes standby's view of the leader's).
const unknownReason = "unknown"

// NewCollector exports reporter's GPUs, functions and model cache.
func NewCollector(reporter GPUReporter) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("faas_gpu_"+name, help, labels, nil)
	}
	return &collector{
		rep:              reporter,
		smAllocated:      d("gpu_sm_allocated_percent", "SM % of the GPU given to replicas (MPS active-thread percentages summed).", "node", "gpu"),
		memAllocated:     d("gpu_memory_allocated_bytes", "GPU memory given to replicas, warm ones included.", "node", "gpu"),
		memCapacity:      d("gpu_memory_capacity_bytes", "GPU memory.", "node", "gpu"),
		gpuReplicas:      d("gpu_replicas", "Replicas on the GPU by state: active (in service or starting), idle (warm, scaled down), standby (warm, started for the next rise).", "node", "gpu", "state"),
		fnReplicas:       d("function_replicas", "Replicas of the function by state: desired, ready, pending, idle (warm).", "function", "namespace", "state"),
		fnSlice:          d("function_slice_sm_percent", "SM % a new replica of the function gets.", "function", "namespace"),
		fnRate:           d("function_request_rate", "Smoothed request rate the autoscaler sees, requests per second.", "function", "namespace"),
		fnSLO:            d("function_slo_seconds", "The function's latency SLO (com.openfaas.gpu.slo); absent without one.", "function", "namespace"),
		fnParked:         d("function_parked_processes", "Processes of the function started ahead of its placements, off the GPU, waiting for one (com.openfaas.gpu.parked).", "function", "namespace"),
		pending:          d("pending_replicas", "Replicas that fit on no GPU yet, by cause: sm, memory, sm_or_memory (some GPUs lack SM %, the others memory), whole_gpus, no_gpu, port (booked, waiting for a fixed upstream port another replica holds), unknown (not tried yet).", "reason"),
		cacheHits:        d("cache_hits_total", "Requests whose model was in the replica's GPU memory."),
		cacheNodeHits:    d("cache_node_hits_total", "Model loads served from the node tier."),
		cacheMisses:      d("cache_misses_total", "Cold model loads."),
		evictions:        d("cache_evictions_total", "Evictions: a model from a replica (model), a warm replica for memory (replica), a warm replica after its TTL (expired).", "kind"),
		decisions:        d("scheduler_decisions_total", "Placement attempts by result: placed, placed_with_eviction (warm replicas evicted to fit, counted in cache_evictions_total), pending (fits on no GPU; tried again whenever capacity may have freed).", "result"),
		decisionSeconds:  d("scheduler_decision_duration_seconds", "Wall time of one placement attempt."),
		autoscaler:       d("autoscaler_actions_total", "Autoscaler decisions applied, by direction: up adds replicas, down removes some (to zero included).", "function", "namespace", "direction"),
		startupSeconds:   d("replica_startup_seconds", "Time from a replica's placement (Kubernetes: its pod's creation, to the second) to ready: for a process or a pod mostly its model load; an emulated replica is ready at once and loads on its first request."),
		quarantined:      d("state_records_quarantined_total", "State records (local mode) that could not be read at start-up and were moved to the state dir's quarantine folder; the rest is served."),
		idleLoads:        d("idle_model_loads_total", "Models the provider asked replicas to load in their idle time (POST /_/models), by outcome: loaded, no_room (it would have had to evict), not_spoken (the replica does not take loads; it is asked no more), failed.", "outcome"),
		modelLoadSeconds: d("model_load_duration_seconds", "Model loads whose duration the provider knows, by source: cold (a cache miss) or node (the node tier); emulated replicas only, as a process or a pod loads its model unseen (see replica_startup_seconds).", "source"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.smAllocated, c.memAllocated, c.memCapacity, c.gpuReplicas, c.fnReplicas, c.fnSlice, c.fnRate, c.fnSLO, c.fnParked, c.pending,
		c.cacheHits, c.cacheNodeHits, c.cacheMisses, c.evictions, c.decisions, c.decisionSeconds, c.autoscaler, c.startupSeconds, c.modelLoadSeconds, c.idleLoads, c.quarantined} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := c.rep.GPUReport(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.smAllocated, err)
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			gauge(c.smAllocated, float64(g.SMAllocated), n.Name, g.UUID)
			gauge(c.memAllocated, float64(g.MemoryAllocated), n.Name, g.UUID)
			gauge(c.memCapacity, float64(g.MemoryBytes), n.Name, g.UUID)
			active, idle, standby := 0, 0, 0
			for _, r := range g.Replicas {
				switch {
				case r.Standby:
					standby++
				case r.Idle:
					idle++
				default:
					active++
				}
			}
			gauge(c.gpuReplicas, float64(active), n.Name, g.UUID, "active")
			gauge(c.gpuReplicas, float64(idle), n.Name, g.UUID, "idle")
			gauge(c.gpuReplicas, float64(standby), n.Name, g.UUID, "standby")
		}
	}
	for _, f := range rep.Functions {
		gauge(c.fnReplicas, float64(f.Replicas), f.Name, f.Namespace, "desired")
		gauge(c.fnReplicas, float64(f.Ready), f.Name, f.Namespace, "ready")
		gauge(c.fnReplicas, float64(f.Pending), f.Name, f.Namespace, "pending")
		gauge(c.fnReplicas, float64(f.Idle), f.Name, f.Namespace, "idle")
		gauge(c.fnSlice, float64(f.SMPercent), f.Name, f.Namespace)
		gauge(c.fnRate, f.Rate, f.Name, f.Namespace)
		gauge(c.fnParked, float64(f.Parked), f.Name, f.Namespace)
		if slo, err := time.ParseDuration(f.SLO); err == nil && slo > 0 {
			gauge(c.fnSLO, slo.Seconds(), f.Name, f.Namespace)
		}
	}
	// Every cause has its series, 0 included, so the sum is 0 rather than
	// no data when nothing waits.
	pending := map[string]int{unknownReason: 0}
	for _, code := range scheduler.NoFitCodes() {
		pending[string(code)] = 0
	}
	for _, p := range rep.Pending {
		code := string(p.ReasonCode)
		if _, known := pending[code]; !known {
			code = unknownReason
		}
		pending[code]++
	}
	for code, n := range pending {
		gauge(c.pending, float64(n), code)
	}
	counter(c.cacheHits, float64(rep.Cache.Hits))
	counter(c.cacheNodeHits, float64(rep.Cache.NodeHits))
	counter(c.cacheMisses, float64(rep.Cache.Misses))
	counter(c.evictions, float64(rep.Cache.ModelEvictions), "model")
	counter(c.evictions, float64(rep.Cache.ReplicaEvictions), "replica")
	counter(c.evictions, float64(rep.Cache.Expirations), "expired")

	st := rep.Stats
	counter(c.decisions, float64(st.Decisions.Placed), "placed")
	counter(c.decisions, float64(st.Decisions.PlacedWithEviction), "placed_with_eviction")
	counter(c.decisions, float64(st.Decisions.Pending), "pending")
	histogram := func(d *prometheus.Desc, h scheduler.Histogram, labels ...string) {
		ch <- prometheus.MustNewConstHistogram(d, h.Count, h.Sum, h.Buckets(), labels...)
	}
	histogram(c.decisionSeconds, st.Decisions.Seconds)
	histogram(c.startupSeconds, st.StartupSeconds)
	for source, h := range st.ModelLoadSeconds {
		histogram(c.modelLoadSeconds, h, source)
	}
	for outcome, n := range st.IdleLoads {
		counter(c.idleLoads, float64(n), outcome)
	}
	for _, a := range st.Autoscaler {
		counter(c.autoscaler, float64(a.Up), a.Function, a.Namespace, "up")
		counter(c.autoscaler, float64(a.Down), a.Function, a.Namespace, "down")
	}
	if q, ok := c.rep.(quarantineCounter); ok {
		counter(c.quarantined, float64(q.QuarantinedRecords()))
	}
}
