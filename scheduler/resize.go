package scheduler

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// ResizeMargin is how much more than the demand a function's replicas
// must serve after a resize: a resize costs a start-up, so it is made only
// where a small rise of the load would not call for a scale-up at once
// (hysteresis against the autoscaler, which adds at capacity < demand).
const ResizeMargin = 1.25

// ResizeMinSaving is the least share of the replaced replicas' cost a
// resize must save: below it, the start-up and its model load are not
// worth it, and two slices of nearly the same cost never swap back and
// forth.
const ResizeMinSaving = 0.2

// ResizeInput is what one resize decision reads: no clock, no state.
type ResizeInput struct {
	Now time.Time
	// Rate is the smoothed request rate (req/s); Rising and Backlog as
	// in AutoscaleInput. No resize is made while a backlog waits.
	Rate, Rising, Backlog float64
	Policy                ScalePolicy
	// Replicas are the function's replicas in service, all Ready (the
	// caller asks only when none is starting or being replaced).
	Replicas []ReplicaCapacity
	// Configs, SLO and MemoryPercent as in AutoscaleInput.
	Configs       []SliceConfig
	SLO           time.Duration
	MemoryPercent float64
	// The last scale-up, scale-down and resize: the cool-down runs from
	// the latest.
	LastScaleUp, LastScaleDown, LastResize time.Time
	// MemoryShort: a GPU holding one of the replicas has less memory free
	// than one more replica of the function takes. A merge that frees
	// memory is then worth its start-up even where it saves little of
	// the cost (see Resize).
	MemoryShort bool
	// LastRequest, Gaps and WarmTTL tell an idle gap (InIdleGap): no
	// resize is made in one, since the rate it reads is decaying toward
	// an off period's zero, not following the load that comes back.
	LastRequest time.Time
	Gaps        []time.Duration
	WarmTTL     time.Duration
	// Resumed is when the function's last idle gap ended (zero: none
	// seen). The cool-down runs from it too: the smoothed rate then
	// still carries the gap's decay for a few half-lives, below the load
	// that came back, and a resize to it meets that load too small.
	Resumed time.Time
	// CacheFloor as in AutoscaleInput: a merge leaves no fewer replicas
	// in service than a scale-down may.
	CacheFloor int
	// FlapHeld: a harmful flap holds the pool (FlapGuard). A smaller
	// slice or a merge is a scale-down judged on the same rate, and is
	// not made while it holds.
	FlapHeld bool
}

// Replacement is a resize: one new replica of New replaces the replicas
// Old, make-before-break (lifecycle/replace.go).
type Replacement struct {
	Old    []string
	New    SliceConfig
	Reason string
	// OpensGPU: the replacement saves at least a whole GPU's cost
	// (MergeOpensGPU), so its new replica may go to a GPU not in use
	// where none in use has room for it (see MergeOpensGPU).
	OpensGPU bool
}

// MergeOpensGPU is the least saving, in % of a GPU, at which a
// replacement's new replica may open a GPU: make before break needs room
// for it while the replicas it replaces still serve, and a pool of small
// slices that fills the gaps of every GPU in use leaves none (h05 seed 14:
// eight vgg19_bn slices, 140 % SM, a 45 % one in their place never found
// room). Once it is ready they leave more than the GPU it opened, and
// consolidation frees one. Below a GPU's worth it would only move cost.
const MergeOpensGPU = 100

// Resize decides whether a function with an SLO should replace some of
// its replicas by one cheaper one (cost: the larger of SM % and the
// memory's share of a GPU), its capacity from the queueing model (see
// Autoscale). It considers replacing each replica alone by a smaller
// slice (an oversized one, after the load fell) and the k smallest
// together by one (a merge, k ≥ 2): the new replica must carry what the
// rest leave of the demand x ResizeMargin and cost at most 1 -
// ResizeMinSaving of those it replaces. It takes the one that saves the
// most. Nothing happens without an SLO, within the cool-down of any
// scaling or resize, while a backlog waits or a flap holds the pool
// (FlapGuard), or where the replicas left would fall below the scale
// minimum.
func Resize(in ResizeInput, opts AutoscaleOptions) (Replacement, bool) {
	if in.SLO <= 0 || len(in.Replicas) == 0 || in.Backlog > 0 || in.FlapHeld {
		return Replacement{}, false
	}
	if InIdleGap(in.Now, in.LastRequest, in.Rate, in.Gaps, in.WarmTTL) {
		return Replacement{}, false
	}
	last := in.LastScaleUp
	for _, t := range []time.Time{in.LastScaleDown, in.LastResize, in.Resumed} {
		if t.After(last) {
			last = t
		}
	}
	if in.Now.Sub(last) < opts.CoolDown {
		return Replacement{}, false
	}
	sz := newSizer(in.SLO, opts.SLOQuantile, in.MemoryPercent)
	menu := sz.menu(in.Configs)
	if len(menu) == 0 {
		return Replacement{}, false
	}
	// Judged at the rate a scale-up plans for: within a rise the
	// smoothed rate lags the load, and a merge judged on it takes away
	// capacity the next tick adds back, a start-up and a mix's loads
	// later (h16 seed 16: a burst met by replicas started ahead of it
	// lost two of them to a merge judged at 96 req/s of its 180).
	demand := max(in.Rate, in.Rising) * ResizeMargin
	pools := sz.joinsPools(menu)
	// Candidates: every replica alone, and the k smallest by capacity
	// (the oldest first among equals: Replicas are oldest first).
	bySize := make([]ReplicaCapacity, len(in.Replicas))
	copy(bySize, in.Replicas)
	sort.SliceStable(bySize, func(i, j int) bool { return sz.capOf(bySize[i].Config) < sz.capOf(bySize[j].Config) })
	var sets [][]ReplicaCapacity
	for _, r := range in.Replicas {
		sets = append(sets, []ReplicaCapacity{r})
	}
	for k := 2; k <= len(bySize); k++ {
		sets = append(sets, bySize[:k])
	}
	floor := fewestLeft(in.Policy, in.CacheFloor, 0) // a flap's hold stops every resize above
	var best Replacement
	bestSaving := 0.0
	for _, set := range sets {
		if len(in.Replicas)-len(set)+1 < floor {
			continue
		}
		costSet := 0.0
		rest := make([]SliceConfig, 0, len(in.Replicas)-len(set)+1)
		for _, r := range in.Replicas {
			if !slices.ContainsFunc(set, func(x ReplicaCapacity) bool { return x.ID == r.ID }) {
				rest = append(rest, r.Config)
			}
		}
		for _, r := range set {
			costSet += sz.cost(r.Config)
		}
		if len(set) == 1 && sz.serves(rest, demand) {
			continue // the autoscaler's scale-down removes it outright
		}
		// The cheapest slice with which the rest serve the demand, as a
		// pool (see Autoscale).
		rest = append(rest, SliceConfig{})
		var c SliceConfig
		ok := false
		for _, m := range menu {
			if !pools(m, len(rest)) {
				continue
			}
			rest[len(rest)-1] = m
			if (!ok || cheaper(m, c, sz)) && sz.serves(rest, demand) {
				c, ok = m, true
			}
		}
		if !ok || (len(set) == 1 && c == set[0].Config) {
			continue
		}
		saving := costSet - sz.cost(c)
		if saving < ResizeMinSaving*costSet {
			// Where memory is short, a merge into a slice no larger than
			// their SM together frees the memory of all but one, which
			// the cost of each hides where SM sets it: 10 % and 15 % of
			// a model of 12 % of a GPU's memory cost 12 + 15, one 25 %
			// slice 25, yet the two hold twice its memory, which a full
			// GPU lacks for any other replica or move.
			freed := float64(len(set)-1) * in.MemoryPercent
			if !in.MemoryShort || len(set) < 2 || c.SMPercent > smOf(set) || saving < 0 || freed < ResizeMinSaving*costSet {
				continue
			}
			saving = freed
		}
		if saving <= bestSaving+1e-9 {
			continue
		}
		bestSaving = saving
		best = Replacement{New: c, OpensGPU: saving >= MergeOpensGPU}
		for _, r := range set {
			best.Old = append(best.Old, r.ID)
		}
		what := "resize"
		if len(set) > 1 {
			what = fmt.Sprintf("merge %d replicas", len(set))
		}
		best.Reason = fmt.Sprintf("%s: rate %.1f req/s x %.2f is served with sm %d%% batch %d in their place, at cost %.0f, not %.0f",
			what, in.Rate, ResizeMargin, c.SMPercent, c.Batch, sz.cost(c), costSet)
	}
	return best, len(best.Old) > 0
}

// smOf is the SM % replicas rs take together.
func smOf(rs []ReplicaCapacity) int {
	n := 0
	for _, r := range rs {
		n += r.Config.SMPercent
	}
	return n
}
