package sim

import (
	"math"
	"time"
)

// timeShare is a GPU whose replicas take turns: CUDA time slicing gives
// every process with work an equal share of the GPU's time, so k busy
// replicas each progress at 1/k of their dedicated speed (processor
// sharing). This is the time-sharing baseline's GPU; spatial policies give
// each replica its own SMs instead.
type timeShare struct {
	running []*replica
	last    time.Duration
	gen     uint64
}

// shareAdd starts r computing d of dedicated-GPU time on its GPU.
func (e *Engine) shareAdd(r *replica, d time.Duration) {
	ts := &r.gpu.ts
	e.shareAdvance(ts)
	r.work = float64(d)
	ts.running = append(ts.running, r)
	e.shareSchedule(r.gpu)
}

// shareAdvance charges the time since the last change to the batches
// running, each getting an equal part.
func (e *Engine) shareAdvance(ts *timeShare) {
	if n := len(ts.running); n > 0 {
		each := float64(e.now-ts.last) / float64(n)
		for _, r := range ts.running {
			r.work -= each
		}
	}
	ts.last = e.now
}

// shareSchedule plans the next completion on g (earlier plans go stale).
func (e *Engine) shareSchedule(g *gpuState) {
	ts := &g.ts
	ts.gen++
	if len(ts.running) == 0 {
		return
	}
	least := math.Inf(1)
	for _, r := range ts.running {
		least = min(least, r.work)
	}
	d := time.Duration(math.Ceil(max(least, 0) * float64(len(ts.running))))
	e.after(d, event{kind: evShare, gpu: g, gen: ts.gen})
}

// shareStep completes the batches whose work is done.
func (e *Engine) shareStep(g *gpuState, gen uint64) {
	ts := &g.ts
	if gen != ts.gen {
		return
	}
	e.shareAdvance(ts)
	var done []*replica
	kept := ts.running[:0]
	for _, r := range ts.running {
		if r.work <= 0.5 { // within half a nanosecond: rounding
			done = append(done, r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(ts.running[len(kept):])
	ts.running = kept
	e.shareSchedule(g)
	for _, r := range done {
		e.finish(r)
	}
}
