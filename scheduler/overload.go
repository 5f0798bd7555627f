package scheduler

import "time"

// YieldMargin is how much more full-batch throughput per cost a replica
// waiting for room must have than the one that yields to it: a swap costs
// a start-up and a model load, and two slices of nearly one efficiency
// never swap back and forth.
const YieldMargin = 1.25

// YieldCandidate is a replica in an overload: one waiting for room, or
// one in service that might give its room up.
type YieldCandidate struct {
	ID, Function string
	Config       SliceConfig
	// Cost is its slice's cost (the larger of SM % and its memory's
	// share of a GPU, as the autoscaler counts it).
	Cost float64
	// Spare: its function keeps another replica in service without it
	// (in service only; a function is never starved to make room).
	Spare bool
	// Room is the SM % its GPU would have free without it (in service
	// only): a yield must make room for the replica it yields to.
	Room int
	// Serving is how many replicas its function has in service (waiting
	// only): among equally efficient ones, the function with fewest gets
	// the room, so that functions of one model share it.
	Serving int
}

// efficiency is full-batch throughput per cost: an overloaded function's
// queue holds full batches, so that is what a slice serves of it.
func (c YieldCandidate) efficiency() float64 {
	if c.Cost <= 0 {
		return 0
	}
	return c.Config.Throughput / c.Cost
}

// Yield decides, when the cluster has no room for replicas that
// overloaded functions wait for (pending), which replica in service of
// another overloaded function (live) gives its room up, so that GPUs go to
// the slices that serve most per cost. It takes the most efficient pending
// replica (of the function with fewest in service among equals) and the least efficient live one of another function that has a
// spare replica, frees enough SM % on its GPU for it and is less efficient
// by YieldMargin; none: ok false. One a call: the caller asks once a tick,
// and the autoscaler sees the new state before the next.
func Yield(pending, live []YieldCandidate) (victim, beneficiary string, ok bool) {
	var best *YieldCandidate
	for i := range pending {
		p := &pending[i]
		if best == nil || p.efficiency() > best.efficiency() ||
			p.efficiency() == best.efficiency() && (p.Serving < best.Serving || p.Serving == best.Serving && p.ID < best.ID) {
			best = p
		}
	}
	if best == nil {
		return "", "", false
	}
	var worst *YieldCandidate
	for i := range live {
		v := &live[i]
		if !v.Spare || v.Function == best.Function || v.Room < best.Config.SMPercent ||
			v.efficiency()*YieldMargin >= best.efficiency() {
			continue
		}
		if worst == nil || v.efficiency() < worst.efficiency() || v.efficiency() == worst.efficiency() && v.ID < worst.ID {
			worst = v
		}
	}
	if worst == nil {
		return "", "", false
	}
	return worst.ID, best.ID, true
}

// Overloaded reports whether a function's backlog alone asks for more than
// all its replicas serve (backlog / drain time above their capacity at
// the SLO): its queue then holds full batches, whatever its slices would
// do at the SLO, and what drains it is throughput per cost. In a full
// cluster the lifecycle core lets its replicas waiting for room take the
// room of a less efficient replica of another overloaded function
// (Yield).
func Overloaded(in AutoscaleInput, opts AutoscaleOptions) bool {
	if in.SLO <= 0 || in.Backlog <= 0 {
		return false
	}
	if opts.DrainTime <= 0 {
		opts.DrainTime = DefaultDrainTime
	}
	sz := newSizer(in.SLO, opts.SLOQuantile, in.MemoryPercent)
	capacity := 0.0
	for _, r := range in.Replicas {
		capacity += sz.capOf(r.Config)
	}
	return in.Backlog/opts.DrainTime.Seconds() > capacity
}

// YieldCost is a slice's cost as the autoscaler counts it, for
// YieldCandidate.Cost.
func YieldCost(c SliceConfig, slo time.Duration, memoryPercent float64) float64 {
	return newSizer(slo, 0, memoryPercent).cost(c)
}
