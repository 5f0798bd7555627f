package sim

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The zoo suites: the family suites' other half. A family draw deploys
// one function per model; a multi-model function (one function serving
// many models, X-Model) has its own rules in the lifecycle (its capacity
// follows the mix its requests name, its warm replicas are a cache of
// models), and until these draws only the held-out suite's h16 and h19
// and the locality run measured them: two workloads, looked at through
// months of tuning. A zoo draw is made as a family draw is: from one
// fixed seed, committed before its first run, never redrawn, and not to
// be tuned on.
//
// Each draws, independently: how many models the one function serves (3
// to 20, h19 serves 8 and h16 20), named at random without repeats among
// the light, the heavy or all 69; the popularity skew among them (Zipf 0
// to 1.5); the load level (x0.5 to x2 of the family's base per model);
// the SLO factor (2 to 10) of its slowest model's batch-1 latency, so
// that every model can meet it; the replicas' memory (8 or 16 GiB, h19's
// and h16's, so that several models stay resident in one); the arrivals'
// shape as the family draws it; and the cold start (3 to 30 s).

// zooDraws are the zoo draws, in the order they were made; each is fixed
// once, like familyDraws.
var zooDraws = []familyDraw{
	{"zoo", 20270201, "za"},   // before any run of a zoo draw, and before the warm replicas of a multi-model function lost their first-minute hold (tried on h16 and h19 only): its blind check
	{"zoo2", 20270202, "zb"},  // after zoo's first run (main and the lost hold, which was not kept) and before any fix of what it showed: the blind check of that fix
	{"zoo3", 20270203, "zc"},  // after zoo2 was the blind check of the cache floor and its runs were traced (zb01's flap): first run as the blind check of a mix slice timed halfway to its slowest model (not kept)
	{"zoo4", 20270204, "zd"},  // after zoo3 was the blind check of the halfway timing (not kept): first run as the blind check of models placed in idle time with the wait for holders by load time (kept)
	{"zoo5", 20270205, "ze"},  // after zoo4 was the blind check of models placed in idle time: first run as the blind check of the SLO feedback beside a queue the model expects (kept), then seen by late requests last in X-Model queues
	{"zoo6", 20270206, "zf"},  // after zoo5 was the blind check of the feedback: first run as the blind check of late requests last in X-Model queues (kept)
	{"zoo7", 20270207, "zg"},  // after zoo6 was the blind check of late requests last: first run as the blind check of the flap's hold (kept)
	{"zoo8", 20270208, "zh"},  // after zoo7 was the blind check of the flap's hold: first run as the blind check of a scale-up that takes a warm replica back holding nothing from consolidation (kept)
	{"zoo9", 20270209, "zi"},  // after zoo8 was the blind check of warm take-backs holding nothing from consolidation: first run as the blind check of a periodic bursty function's model caches yielding between its bursts (kept)
	{"zoo10", 20270210, "zj"}, // after zoo9 was the blind check of model caches yielding between bursts: first run as the blind check of a multi-model burst after a yield planned at its peak (kept; no run moved)
	{"zoo11", 20270211, "zk"}, // after zoo10 was the blind check of a multi-model burst planned at its peak after a yield: first run as the blind check of a resize judged at a rise (kept; no run moved with parking)
	{"zoo12", 20270212, "zl"}, // after zoo11 was the blind check of a resize judged at a rise: first run as the blind check of a merge kept at the cache floor (kept; no run moved)
	{"zoo13", 20270213, "zm"}, // after zoo12 was the blind check of a merge kept at the cache floor: first run as the blind check of warm replicas held only for a burst's planned peak (kept, then held wholly within a burst after a seen run)
	{"zoo14", 20270214, "zn"}, // after zoo13 was the blind check of warm replicas held for a burst's planned peak: the blind check of what is tuned next
}

// zooCount is how many workloads a zoo draw holds.
const zooCount = 20

// zooMaxModels is the most models a zoo function serves.
const zooMaxModels = 20

// zoo draws a zoo suite from seed, its workloads named prefix01,
// prefix02...
func zoo(seed uint64, prefix string) ([]scenario, error) {
	d, err := newDrawer(seed)
	if err != nil {
		return nil, fmt.Errorf("zoo suite: %w", err)
	}
	out := make([]scenario, 0, zooCount)
	for i := range zooCount {
		mix, from := d.mix()
		pool := slices.Clone(from)
		n := int(math.Round(d.logUniform(3, zooMaxModels)))
		d.rng.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
		models := pool[:n] // distinct: one function serves each once
		zipf := math.Round(d.uniform(0, 1.5)*10) / 10
		load := math.Round(d.logUniform(0.5, 2)*100) / 100
		sloFactor := math.Round(d.logUniform(2, 10)*10) / 10
		memory := int64(8) << (30 + d.rng.IntN(2)) // 8 or 16 GiB
		cold := time.Duration(d.uniform(3, 30)) * time.Second
		rate := math.Round(float64(n) * mix.perRPS * load)
		name := fmt.Sprintf("%s%02d-%s%d", prefix, i+1, mix.name, n)
		s := Spec{Name: name, Models: models, MultiModel: true, Zipf: zipf, Poisson: true, Seed: 12, SLOFactor: sloFactor,
			MemoryBytes: memory, Max: 200, GPUs: 64, PerNode: 8, Duration: 10 * time.Minute, Rate: rate,
			Options: Options{Warmup: suiteWarmup, ContainerStart: cold}}
		arrivals := d.arrivals(i, rate, &s)
		about := fmt.Sprintf("one function serving %d %s models (X-Model), Zipf %.1f, x%.2f load: %s, SLO x%.1f of its slowest model, %d GiB replicas, cold %v",
			n, mix.name, zipf, load, arrivals, sloFactor, memory>>30, cold)
		out = append(out, scenario{name: name, about: about, spec: func() Spec { return s }})
	}
	return out, nil
}
