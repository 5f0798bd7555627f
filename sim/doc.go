// Package sim is faas-gpu's discrete-event simulator: it replays a
// workload (a trace or a generator) in virtual time against a GPU cluster
// and one scheduling policy at a time, and measures what users choose a
// scheduler on: latency, SLO violations, throughput, GPUs and GPU-seconds,
// SM occupancy and model-cache behaviour.
//
// The faas-gpu policy drives the provider's own decision code
// (scheduler.PlanFunction, Allocator.Place/Demote/Promote/Release,
// Autoscale, RateEstimator, Pull, LocalityAware, NextFor) and
// its model cache (cache.Cache); replicas serve requests in the latency
// the measured profiles give for their slice (profiles.Profile.Latency,
// interpolated, never a formula). The baselines (time sharing, FaST-GShare,
// LB, LALB, LALB+O3) are implemented here from their papers; each policy's
// doc comment cites the section or slide it follows. docs/evaluation.md
// has the published runs.
//
// Time is a time.Duration since the start of the run; nothing reads the
// wall clock except the progress report. A run is deterministic for a
// given workload, cluster and seed.
package sim
