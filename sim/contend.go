package sim

import (
	"math"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// nodeState is one node as the contention model sees it: its GPUs, and
// its CPU cores, which the host parts of the batches computing on them
// share. Every batch progresses through its dedicated (uncontended)
// duration at a rate that the others busy at the same time set
// (Contention); the rates change only when a batch starts or ends on the
// same GPU, or when the node's CPU factor changes, so between changes
// every batch moves linearly, and its completion is planned again only
// when its rate rises (a batch whose rate never changes completes exactly
// when it would without the model, in the same order).
type nodeState struct {
	gpus  []*gpuState
	cores float64
	// host is the host fractions of the batches computing on the node,
	// busy how many there are, cpu the factor their host parts stretch by.
	host float64
	busy int
	cpu  float64
}

// contendAdd starts r computing a batch that takes d on its slice alone.
func (e *Engine) contendAdd(r *replica, d time.Duration) {
	g := r.gpu
	e.contendAdvance(g)
	m := &e.models[r.batchModel]
	r.work = float64(d)
	r.gpuFrac, r.hostFrac = m.fractions(len(r.running), r.sm, r.quota, d)
	r.penalty = m.penalty
	r.weight = float64(r.share) / fullShare
	r.rate = 0 // planned below, whatever its rate
	g.crun = append(g.crun, r)
	g.node.host += r.hostFrac
	g.node.busy++
	e.contendChanged(g)
}

// contendDone completes r's batch if the event is its current plan.
func (e *Engine) contendDone(r *replica, gen uint64) {
	if gen != r.cgen {
		return
	}
	g := r.gpu
	e.contendAdvance(g)
	if r.work > 0.5 { // slowed since planned: not done yet
		e.planDone(r)
		return
	}
	g.crun = slices.DeleteFunc(g.crun, func(x *replica) bool { return x == r })
	n := g.node
	if n.busy--; n.busy == 0 {
		n.host = 0 // no float residue to carry
	} else {
		n.host -= r.hostFrac
	}
	e.contendChanged(g)
	e.finish(r)
}

// contendAdvance charges the time since g's last change to its running
// batches at their rates.
func (e *Engine) contendAdvance(g *gpuState) {
	if dt := float64(e.now - g.clast); dt > 0 {
		for _, r := range g.crun {
			r.work -= dt * r.rate
		}
	}
	g.clast = e.now
}

// contendChanged sets the rates after a batch started or ended on g: g's,
// or every GPU's of the node when its CPU factor moved.
func (e *Engine) contendChanged(g *gpuState) {
	n := g.node
	cpu := max(1, n.host/n.cores)
	if cpu == n.cpu {
		e.contendRates(g, cpu)
		return
	}
	n.cpu = cpu
	for _, other := range n.gpus {
		if other != g {
			e.contendAdvance(other)
		}
		e.contendRates(other, cpu)
	}
}

// contendRates sets the rate (dedicated time per virtual time, 1 alone)
// of every batch running on g from who else is busy there and the node's
// CPU factor.
func (e *Engine) contendRates(g *gpuState, cpu float64) {
	g.cWeight, g.cLoad, g.cStretch = 0, 0, 1
	for _, r := range g.crun {
		g.cWeight += r.weight
		g.cLoad += r.weight * r.gpuFrac / (r.others(cpu) + r.gpuFrac)
	}
	if g.cLoad > 1+1e-12 {
		g.cStretch = gpuStretch(g, cpu)
	}
	for _, r := range g.crun {
		stretch := r.others(cpu) + r.gpuFrac*g.cStretch
		rate := 1 / (stretch * (1 + r.penalty*(g.cWeight-r.weight)))
		switch {
		case rate == r.rate:
		case rate < r.rate && r.rate > 0:
			// Slower: the planned completion comes too early and
			// contendDone plans again then, which saves a heap push per
			// neighbour that starts.
			r.rate = rate
		default:
			r.rate = rate
			e.planDone(r)
		}
	}
}

// planDone plans r's completion at its rate (earlier plans go stale).
func (e *Engine) planDone(r *replica) {
	r.cgen++
	e.after(time.Duration(math.Ceil(max(r.work, 0)/r.rate)), event{kind: evContend, rep: r, gen: r.cgen})
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
func gpuStretch(g *gpuState, cpu float64) float64 {
	load := func(s float64) float64 {
		sum := 0.0
		for _, r := range g.crun {
			sum += r.weight * r.gpuFrac / (r.others(cpu) + r.gpuFrac*s)
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
