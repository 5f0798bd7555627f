package sim

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// LowerBound is how few GPU-seconds any packing could serve a workload
// with, window by window:
//
//   - SMGPUSeconds is the packing bound: the sum over functions of
//     the smallest SM share serving the window's measured rate at the SLO
//     (rate / the best throughput per SM % among measured slices meeting
//     it), over 100 % per GPU;
//   - GPUSeconds adds what every policy here must also respect: GPU
//     memory (rate / the fastest slice's throughput, times a replica's
//     memory, over a GPU's memory) and each function's minimum replicas
//     (Function.Min x the smallest slice meeting the SLO, and x its
//     memory); it takes the larger of SM and memory in each window, in
//     fractional GPUs;
//   - WholeGPUSeconds rounds GPUSeconds up to whole GPUs in each window.
//
// It ignores queueing, start-up and the headroom an autoscaler keeps, so
// no policy reaches it; the gap says what those cost.
//
// The Queue figures are a second, reachable reference beside it (never
// instead of it): a bound under the project's own queueing model, not
// under physics. In each window, each function is priced at the replicas
// scheduler.PlanFromZero gives for the window's measured rate — the pool
// of least cost (the larger of SM % and memory share, per replica) that
// the autoscaler's search finds among the slices carrying load at the
// SLO's p99, holding the SLO as one pool by scheduler.PoolCapacity's model
// (interference margin included), and at least Function.Min of them. Their
// SM % and memory are then packed as above: QueueSMGPUSeconds and
// QueueMemoryGPUSeconds, their larger in each window QueueGPUSeconds, in
// whole GPUs QueueWholeGPUSeconds. It assumes perfect foresight (each
// window's rate known at its start), no start-up, no backlog, no headroom
// beyond the model and perfect packing, so it is what the faas-gpu policy
// would book if its plan were made for each window's true rate and moved
// at no cost; what the policy uses above it is its own waste (reacting,
// warm replicas, packing, resizing late), what lies between it and the
// whole-GPU bound is the price of the SLO under the model (waiting at a
// tight SLO, the interference margin). It is exact only as far as the
// autoscaler's search is: a mixed pool it does not try could be cheaper.
// A multi-model function's requests are priced at the models they name:
// in the SM and memory figures each at its own model's best slice, in the
// Queue figures by a plan on the slices that serve the window's mix
// (scheduler.MixConfigs); neither counts model loads, which the whole-GPU
// figures leave out as they do start-up. QueueErr says why the Queue figures are
// NaN (a function whose no slice carries load at the SLO's p99).
type LowerBound struct {
	Window                                    time.Duration
	SMGPUSeconds, MemoryGPUSeconds            float64
	GPUSeconds, WholeGPUSeconds, PeakFraction float64

	QueueSMGPUSeconds, QueueMemoryGPUSeconds float64
	QueueGPUSeconds, QueueWholeGPUSeconds    float64
	QueueErr                                 error
}

// ComputeLowerBound measures rates in windows of window (10 s: the
// FaST-GShare autoscaler's period) on GPUs of gpuMemory bytes.
func ComputeLowerBound(wl *Workload, cat *Catalog, product string, gpuMemory int64, maxBatch int, window time.Duration) (LowerBound, error) {
	if window <= 0 {
		window = 10 * time.Second
	}
	type need struct {
		smPerRPS, memPerRPS float64
		minSM, minMem       float64 // the floor of Function.Min replicas
		queue               queuePricer
		// models, for a multi-model function, are its models' needs by
		// index into wl.Models: each request is priced at the model it
		// names.
		models map[int32]modelNeed
	}
	index := make(map[string]int32, len(wl.Models))
	for i, name := range wl.Models {
		index[name] = int32(i)
	}
	needs := make([]need, len(wl.Functions))
	var queueErr error
	for i, f := range wl.Functions {
		m, first, err := bareNeedOf(cat, product, f.Model, f, maxBatch)
		if err != nil {
			return LowerBound{}, err
		}
		mem := f.replicaMemory(m)
		floor := float64(f.minReplicas())
		needs[i] = need{smPerRPS: first.smPerRPS, memPerRPS: first.memPerRPS, minSM: floor * float64(first.smallest), minMem: floor * float64(mem),
			queue: newQueuePricer(f, scheduler.ConfigsFromProfile(m.prof, f.SLO, maxBatch), mem, gpuMemory, maxBatch)}
		if queueErr == nil && len(needs[i].queue.configs) == 0 {
			queueErr = fmt.Errorf("function %s: no slice of %s carries load within the SLO %s at its p99", f.Name, f.Model, f.SLO)
		}
		if !f.MultiModel() {
			continue
		}
		needs[i].models = map[int32]modelNeed{}
		for _, name := range f.Models {
			mm, n, err := bareNeedOf(cat, product, name, f, maxBatch)
			if err != nil {
				return LowerBound{}, err
			}
			needs[i].models[index[name]] = n
			needs[i].queue.mix = append(needs[i].queue.mix, mixModel{index: index[name], prof: mm.prof})
			needs[i].minSM = min(needs[i].minSM, floor*float64(n.smallest))
		}
	}
	windows := int((wl.Duration + window - 1) / window)
	counts := make([][]int, windows)
	// byModel counts a multi-model function's requests by model, nil for
	// the others.
	byModel := make([][]map[int32]int, windows)
	for i := range counts {
		counts[i] = make([]int, len(wl.Functions))
		byModel[i] = make([]map[int32]int, len(wl.Functions))
		for f := range wl.Functions {
			if needs[f].models != nil {
				byModel[i][f] = map[int32]int{}
			}
		}
	}
	for _, a := range wl.Arrivals {
		if w := int(a.At / window); w < windows {
			counts[w][a.Fn]++
			if m := byModel[w][a.Fn]; m != nil {
				m[a.Model]++
			}
		}
	}
	lb := LowerBound{Window: window, QueueErr: queueErr}
	plans := planCache{}
	for w, c := range counts {
		length := min(window, wl.Duration-time.Duration(w)*window).Seconds()
		sm, smFloor, memFloor := 0.0, 0.0, 0.0
		qSM, qMem := 0.0, 0.0
		for f, n := range c {
			rate := float64(n) / length
			fSM, fMem := rate*needs[f].smPerRPS, rate*needs[f].memPerRPS
			if models := byModel[w][f]; models != nil {
				fSM, fMem = 0, 0
				for mi, k := range models {
					fSM += float64(k) / length * needs[f].models[mi].smPerRPS
					fMem += float64(k) / length * needs[f].models[mi].memPerRPS
				}
			}
			sm += fSM / 100
			smFloor += max(fSM, needs[f].minSM) / 100
			memFloor += max(fMem, needs[f].minMem) / float64(gpuMemory)
			if queueErr == nil {
				s, m := needs[f].queue.price(rate, byModel[w][f], plans)
				qSM += s
				qMem += m
			}
		}
		g := max(smFloor, memFloor)
		lb.SMGPUSeconds += sm * length
		lb.MemoryGPUSeconds += memFloor * length
		lb.GPUSeconds += g * length
		lb.WholeGPUSeconds += math.Ceil(g-1e-9) * length
		lb.PeakFraction = max(lb.PeakFraction, g)
		q := max(qSM, qMem)
		lb.QueueSMGPUSeconds += qSM * length
		lb.QueueMemoryGPUSeconds += qMem * length
		lb.QueueGPUSeconds += q * length
		lb.QueueWholeGPUSeconds += math.Ceil(q-1e-9) * length
	}
	if queueErr != nil {
		nan := math.NaN()
		lb.QueueSMGPUSeconds, lb.QueueMemoryGPUSeconds, lb.QueueGPUSeconds, lb.QueueWholeGPUSeconds = nan, nan, nan, nan
	}
	return lb, nil
}

// modelNeed is what one model's requests take at the SLO itself, as the
// issue defines the bound: SM % x s and memory (bytes) x s per request at
// the best measured slice, and the smallest slice meeting the SLO. Not
// with the queueing capacity the faas-gpu policy plans with
// (ConfigsFromProfile), which is a policy's choice, not a limit of any
// packing.
type modelNeed struct {
	smPerRPS, memPerRPS float64
	smallest            int
}

// bareNeedOf is the modelNeed of f's requests for model, on product.
func bareNeedOf(cat *Catalog, product, model string, f Function, maxBatch int) (modelInfo, modelNeed, error) {
	m, err := cat.model(model, product)
	if err != nil {
		return modelInfo{}, modelNeed{}, err
	}
	configs := scheduler.ConfigsWithin(m.prof, f.SLO, maxBatch)
	if len(configs) == 0 {
		return modelInfo{}, modelNeed{}, fmt.Errorf("function %s: no slice of %s meets the SLO %s", f.Name, m.name, f.SLO)
	}
	bestEff, bestT, smallest := 0.0, 0.0, 100
	for _, c := range configs {
		bestEff = max(bestEff, c.Efficiency())
		bestT = max(bestT, c.Throughput)
		smallest = min(smallest, c.SMPercent)
	}
	return m, modelNeed{smPerRPS: 1 / bestEff, memPerRPS: float64(f.replicaMemory(m)) / bestT, smallest: smallest}, nil
}

// replicaMemory is what a replica of f serving m holds: its explicit
// com.openfaas.gpu.memory, else m's footprint.
func (f Function) replicaMemory(m modelInfo) int64 {
	if f.MemoryBytes > 0 {
		return f.MemoryBytes
	}
	return m.memory
}

// queuePricer prices a function's load for the queueing-aware bound: the
// SM and memory, in GPUs, of the replicas scheduler.PlanFromZero plans for
// a rate.
type queuePricer struct {
	configs                  []scheduler.SliceConfig
	slo                      time.Duration
	memory, gpuMemory        float64
	minReplicas, maxReplicas int
	maxBatch                 int
	// mix, for a multi-model function, are its models: a window is
	// planned on the slices that serve its requests' mix
	// (scheduler.MixConfigs, as the autoscaler values them, without
	// model loads), not on its first model's.
	mix []mixModel
	// key names what the plan depends on besides the rate, so that
	// functions of one model, SLO and scale bounds share their plans.
	key planKey
}

// mixModel is one model of a multi-model function: its index in
// Workload.Models and its profile.
type mixModel struct {
	index int32
	prof  *profiles.Profile
}

// planKey is a plan's identity in planCache; rate is a window's count
// over its length, and the same counts come back window after window.
type planKey struct {
	model                    string
	slo                      time.Duration
	memory                   int64
	minReplicas, maxReplicas int
	rate                     float64
	// mix is a multi-model function's window counts by model.
	mix string
}

// planCache holds priced plans (SM, memory in GPUs) for one bound: the
// scale run's 1,000 functions share a few dozen models.
type planCache map[planKey][2]float64

func newQueuePricer(f Function, configs []scheduler.SliceConfig, memory, gpuMemory int64, maxBatch int) queuePricer {
	return queuePricer{configs: configs, slo: f.SLO, memory: float64(memory), gpuMemory: float64(gpuMemory), maxBatch: maxBatch,
		minReplicas: f.minReplicas(), maxReplicas: f.maxReplicas(),
		key: planKey{model: f.Model, slo: f.SLO, memory: memory, minReplicas: f.minReplicas(), maxReplicas: f.maxReplicas()}}
}

// memoryPercent is a replica's memory in % of a GPU's, as the autoscaler
// weighs it (lifecycle's memoryPercent).
func (q queuePricer) memoryPercent() float64 { return 100 * q.memory / q.gpuMemory }

// price is the SM and memory, in GPUs, of the plan for rate; byModel
// counts a multi-model function's requests by model (nil for others).
func (q queuePricer) price(rate float64, byModel map[int32]int, cache planCache) (sm, memory float64) {
	key := q.key
	key.rate = rate
	configs := q.configs
	var mix scheduler.Mix
	if len(q.mix) > 0 && rate > 0 {
		var shares strings.Builder
		for _, m := range q.mix {
			n := byModel[m.index]
			fmt.Fprintf(&shares, "%d,", n)
			mix.Models = append(mix.Models, scheduler.ModelShare{Profile: m.prof, Share: float64(n)})
		}
		key.mix = shares.String()
	}
	if p, ok := cache[key]; ok {
		return p[0], p[1]
	}
	if key.mix != "" {
		configs = scheduler.MixConfigs(mix, q.slo, q.maxBatch)
	}
	plan := scheduler.PlanFromZero(configs, rate, q.slo, scheduler.DefaultSLOQuantile, q.memoryPercent(), q.minReplicas, q.maxReplicas)
	for _, c := range plan {
		sm += float64(c.SMPercent) / 100
	}
	memory = float64(len(plan)) * q.memory / q.gpuMemory
	cache[key] = [2]float64{sm, memory}
	return sm, memory
}

// String is the line the tool prints under the table, the queueing-aware
// bound on a second line.
func (lb LowerBound) String() string {
	s := fmt.Sprintf("packing lower bound: SM only %.0f GPU-s; with memory and min replicas %.0f GPU-s (memory alone %.0f), %.0f GPU-s in whole GPUs per %s window; peak %.2f GPUs",
		lb.SMGPUSeconds, lb.GPUSeconds, lb.MemoryGPUSeconds, lb.WholeGPUSeconds, lb.Window, lb.PeakFraction)
	if lb.QueueErr != nil {
		return s + "\nqueueing-aware bound: not computed: " + lb.QueueErr.Error()
	}
	return s + fmt.Sprintf("\nqueueing-aware bound (the autoscaler's plan for each window's true rate, under its own queueing model): SM %.0f GPU-s, memory %.0f, %.0f GPU-s, %.0f GPU-s in whole GPUs",
		lb.QueueSMGPUSeconds, lb.QueueMemoryGPUSeconds, lb.QueueGPUSeconds, lb.QueueWholeGPUSeconds)
}
