package sim

import (
	"fmt"
	"math"
	"time"

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
type LowerBound struct {
	Window                                    time.Duration
	SMGPUSeconds, MemoryGPUSeconds            float64
	GPUSeconds, WholeGPUSeconds, PeakFraction float64
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
	}
	needs := make([]need, len(wl.Functions))
	for i, f := range wl.Functions {
		m, err := cat.model(f.Model, product)
		if err != nil {
			return LowerBound{}, err
		}
		// At the SLO itself, as the issue defines the bound: not with the
		// queueing capacity the faas-gpu policy plans with
		// (ConfigsFromProfile), which is a policy's choice, not a limit of
		// any packing.
		configs := scheduler.ConfigsWithin(m.prof, f.SLO, maxBatch)
		if len(configs) == 0 {
			return LowerBound{}, fmt.Errorf("function %s: no slice of %s meets the SLO %s", f.Name, f.Model, f.SLO)
		}
		bestEff, bestT, smallest := 0.0, 0.0, 100
		for _, c := range configs {
			bestEff = max(bestEff, c.Efficiency())
			bestT = max(bestT, c.Throughput)
			smallest = min(smallest, c.SMPercent)
		}
		mem := m.memory
		if f.MemoryBytes > 0 {
			mem = f.MemoryBytes
		}
		floor := float64(f.minReplicas())
		needs[i] = need{smPerRPS: 1 / bestEff, memPerRPS: float64(mem) / bestT, minSM: floor * float64(smallest), minMem: floor * float64(mem)}
	}
	windows := int((wl.Duration + window - 1) / window)
	counts := make([][]int, windows)
	for i := range counts {
		counts[i] = make([]int, len(wl.Functions))
	}
	for _, a := range wl.Arrivals {
		if w := int(a.At / window); w < windows {
			counts[w][a.Fn]++
		}
	}
	lb := LowerBound{Window: window}
	for w, c := range counts {
		length := min(window, wl.Duration-time.Duration(w)*window).Seconds()
		sm, smFloor, memFloor := 0.0, 0.0, 0.0
		for f, n := range c {
			rate := float64(n) / length
			sm += rate * needs[f].smPerRPS / 100
			smFloor += max(rate*needs[f].smPerRPS, needs[f].minSM) / 100
			memFloor += max(rate*needs[f].memPerRPS, needs[f].minMem) / float64(gpuMemory)
		}
		g := max(smFloor, memFloor)
		lb.SMGPUSeconds += sm * length
		lb.MemoryGPUSeconds += memFloor * length
		lb.GPUSeconds += g * length
		lb.WholeGPUSeconds += math.Ceil(g-1e-9) * length
		lb.PeakFraction = max(lb.PeakFraction, g)
	}
	return lb, nil
}

// String is the line the tool prints under the table.
func (lb LowerBound) String() string {
	return fmt.Sprintf("packing lower bound: SM only %.0f GPU-s; with memory and min replicas %.0f GPU-s (memory alone %.0f), %.0f GPU-s in whole GPUs per %s window; peak %.2f GPUs",
		lb.SMGPUSeconds, lb.GPUSeconds, lb.MemoryGPUSeconds, lb.WholeGPUSeconds, lb.Window, lb.PeakFraction)
}
