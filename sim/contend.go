package sim

import (
	"math"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// nodeState is one node as the contention model sees it: the batches
// computing on its GPUs, which share its CPU cores. Every batch
// progresses through its dedicated (uncontended) duration at a rate that
// the others busy at the same time set (Contention); the rates change
// only when a batch starts or ends on the node, so between changes every
// batch moves linearly, and its completion is planned once per change of
// its own rate (a batch whose rate never changes completes exactly when
// it would without the model, in the same order).
type nodeState struct {
	gpus    []*gpuState
	cores   float64
	running []*replica
	last    time.Duration
}

// contendAdd starts r computing a batch that takes d on its slice alone.
func (e *Engine) contendAdd(r *replica, d time.Duration) {
	n := r.gpu.node
	e.contendAdvance(n)
	m := &e.models[r.batchModel]
	r.work = float64(d)
	r.gpuFrac, r.hostFrac = m.fractions(len(r.running), r.sm, r.quota, d)
	r.penalty = m.penalty
	r.weight = float64(r.share) / fullShare
	r.rate = 0 // planned below, whatever its rate
	n.running = append(n.running, r)
	e.contendRates(n)
}

// contendAdvance charges the time since the last change to the running
// batches at their rates.
func (e *Engine) contendAdvance(n *nodeState) {
	if dt := float64(e.now - n.last); dt > 0 {
		for _, r := range n.running {
			r.work -= dt * r.rate
		}
	}
	n.last = e.now
}

// contendRates sets every running batch's rate (dedicated time per
// virtual time, 1 alone) from who else is busy on its GPU and node.
func (e *Engine) contendRates(n *nodeState) {
	for _, g := range n.gpus {
		g.cWeight, g.cLoad, g.cStretch = 0, 0, 1
	}
	host := 0.0
	for _, r := range n.running {
		r.gpu.cWeight += r.weight
		host += r.hostFrac
	}
	cpu := max(1, host/n.cores)
	for _, r := range n.running {
		r.gpu.cLoad += r.weight * r.gpuFrac / (r.others(cpu) + r.gpuFrac)
	}
	for _, g := range n.gpus {
		if g.cLoad > 1+1e-12 {
			g.cStretch = e.gpuStretch(n, g, cpu)
		}
	}
	for _, r := range n.running {
		g := r.gpu
		stretch := r.others(cpu) + r.gpuFrac*g.cStretch
		rate := 1 / (stretch * (1 + r.penalty*(g.cWeight-r.weight)))
		if rate != r.rate {
			r.rate = rate
			r.cgen++
			e.after(time.Duration(math.Ceil(max(r.work, 0)/rate)), event{kind: evContend, rep: r, gen: r.cgen})
		}
	}
}

// others is the part of r's batch that is not GPU work, stretched by the
// node's CPU: its host part, and (below full quota) the wait for its time
// slices, which no neighbour changes.
func (r *replica) others(cpu float64) float64 {
	return 1 - r.gpuFrac - r.hostFrac + r.hostFrac*cpu
}

// gpuStretch is how much longer the GPU parts on g take so that its busy
// replicas occupy exactly the whole GPU: the σ ≥ 1 where
// Σ weight·f / (others + f·σ) = 1 (f: GPU fraction), by bisection
// (the left side falls with σ, and is at most Σ weight / σ).
func (e *Engine) gpuStretch(n *nodeState, g *gpuState, cpu float64) float64 {
	load := func(s float64) float64 {
		sum := 0.0
		for _, r := range n.running {
			if r.gpu == g {
				sum += r.weight * r.gpuFrac / (r.others(cpu) + r.gpuFrac*s)
			}
		}
		return sum
	}
	lo, hi := 1.0, max(1, g.cWeight)
	for range 60 {
		mid := (lo + hi) / 2
		if load(mid) > 1 {
			lo = mid
		} else {
			hi = mid
		}
		if hi-lo < 1e-12*hi {
			break
		}
	}
	return hi
}

// contendDone completes r's batch if the event is its current plan.
func (e *Engine) contendDone(r *replica, gen uint64) {
	if gen != r.cgen {
		return
	}
	n := r.gpu.node
	e.contendAdvance(n)
	n.running = slices.DeleteFunc(n.running, func(x *replica) bool { return x == r })
	e.contendRates(n)
	e.finish(r)
}

// fractions are the shares of a batch of k requests, taking d alone on
// sm % of the SMs at quota %, that its GPU part and its host part take
// (profiles.Split of the smallest measured batch holding k). At full
// quota the host part is the rest; below it, the rest beyond the split's
// host time is the wait for the replica's time slices. Without a split
// (fewer than profiles.MinSplitPoints SM shares measured) the whole batch
// counts as GPU work, as time sharing was modelled before.
func (m *modelInfo) fractions(k, sm, quota int, d time.Duration) (gpuFrac, hostFrac float64) {
	if d <= 0 || sm <= 0 {
		return 0, 0
	}
	s, ok := m.splitFor(k)
	if !ok {
		return 1, 0
	}
	ms := float64(d) / float64(time.Millisecond)
	gpuFrac = min(1, s.GPUPartMs(float64(sm))/ms)
	if quota >= profiles.FullQuota {
		return gpuFrac, 1 - gpuFrac
	}
	return gpuFrac, min(1-gpuFrac, s.HostMs/ms)
}

func (m *modelInfo) splitFor(k int) (profiles.Split, bool) {
	for _, s := range m.splits {
		if s.Batch >= k {
			return s, true
		}
	}
	return profiles.Split{}, false
}
