package scheduler

import (
	"cmp"
	"slices"
	"time"
)

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
	// GPU and Held are the GPU it is on and the SM % it holds there (in
	// service only).
	GPU  string
	Held int
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
// overloaded functions wait for (pending), which replicas in service of
// other overloaded functions (live) give their room up, so that GPUs go to
// the slices that serve most per cost. It takes the most efficient pending
// replica (of the function with fewest in service among equals) and frees
// enough SM % for it on one GPU: the least efficient single replica there
// that does, else the least efficient replicas there together, each of
// another function, less efficient by YieldMargin, its function keeping
// one in service (Spare, and never all of a function's). Sets of fewer
// replicas win, then the one whose most efficient member is least
// efficient. Together matters since scale-ups take the plan of least
// total cost: under overload a GPU fills with small slices, none of which
// alone makes the room of a full-batch one. None: ok false. One
// beneficiary a call: the caller asks once a tick, and the autoscaler sees
// the new state before the next.
func Yield(pending, live []YieldCandidate) (victims []string, beneficiary string, ok bool) {
	var best *YieldCandidate
	for i := range pending {
		p := &pending[i]
		if best == nil || p.efficiency() > best.efficiency() ||
			p.efficiency() == best.efficiency() && (p.Serving < best.Serving || p.Serving == best.Serving && p.ID < best.ID) {
			best = p
		}
	}
	if best == nil {
		return nil, "", false
	}
	inService := map[string]int{} // by function: how many it has in service
	byGPU := map[string][]*YieldCandidate{}
	for i := range live {
		v := &live[i]
		inService[v.Function]++
		if !v.Spare || v.Function == best.Function || v.efficiency()*YieldMargin >= best.efficiency() {
			continue
		}
		byGPU[v.GPU] = append(byGPU[v.GPU], v)
	}
	var pick []*YieldCandidate
	for _, vs := range byGPU {
		set := roomOn(vs, best.Config.SMPercent, inService)
		if set != nil && (pick == nil || betterYield(set, pick)) {
			pick = set
		}
	}
	if pick == nil {
		return nil, "", false
	}
	for _, v := range pick {
		victims = append(victims, v.ID)
	}
	return victims, best.ID, true
}

// roomOn picks, among candidates on one GPU, the replicas whose room makes
// need SM % free there: the least efficient single one that does, else
// the least efficient first until they do, each function keeping one of
// those it has in service. Nil if they cannot.
func roomOn(vs []*YieldCandidate, need int, inService map[string]int) []*YieldCandidate {
	vs = slices.Clone(vs)
	slices.SortFunc(vs, func(a, b *YieldCandidate) int {
		if c := cmp.Compare(a.efficiency(), b.efficiency()); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	for _, v := range vs {
		if v.Room >= need {
			return []*YieldCandidate{v}
		}
	}
	free := vs[0].Room - vs[0].Held // the GPU's, with every candidate there
	taken := map[string]int{}
	var set []*YieldCandidate
	for _, v := range vs {
		if taken[v.Function]+1 >= inService[v.Function] {
			continue
		}
		taken[v.Function]++
		set = append(set, v)
		if free += v.Held; free >= need {
			return set
		}
	}
	return nil
}

// betterYield orders two sets of replicas that would each make the room:
// fewer first, then the one whose most efficient member is the less
// efficient, then by its members' IDs.
func betterYield(a, b []*YieldCandidate) bool {
	if len(a) != len(b) {
		return len(a) < len(b)
	}
	ea, eb := a[len(a)-1].efficiency(), b[len(b)-1].efficiency() // sorted least efficient first
	if ea != eb {
		return ea < eb
	}
	return a[0].ID < b[0].ID
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
