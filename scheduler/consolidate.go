package scheduler

import (
	"sort"
	"time"
)

// ConsolidateReplica is one booking on a GPU as consolidation sees it.
type ConsolidateReplica struct {
	ID          string
	SMPercent   int
	MemoryBytes int64
	// Warm replicas hold memory, no SM share; on a GPU to free they are
	// stopped (they yield), on a target their memory may be evicted.
	Warm bool
	// Fixed replicas keep their GPU in use: starting or draining, spanning
	// GPUs, their function scaling or already in a move. A GPU holding one
	// is never freed.
	Fixed bool
}

// ConsolidateGPU is one GPU and its bookings.
type ConsolidateGPU struct {
	UUID, Product string
	MemoryBytes   int64
	Replicas      []ConsolidateReplica
}

// ConsolidateInput is everything one consolidation pass reads.
type ConsolidateInput struct {
	Now time.Time
	// LastChange is the last time the cluster changed shape: a move
	// begun or finished, a replica that waited for room.
	LastChange time.Time
	// Busy: a move is in flight or a replica waits for a GPU (the
	// cluster is short of room, not long on it).
	Busy bool
	GPUs []ConsolidateGPU
}

// ConsolidateOptions bound a pass.
type ConsolidateOptions struct {
	// MaxMoves is the most replicas one pass moves; 0 turns consolidation
	// off.
	MaxMoves int
	// CoolDown is how long the cluster must be stable before a pass.
	CoolDown time.Duration
}

// DefaultConsolidateOptions move at most 20 replicas a pass, as many as
// one GPU holds at the profiles' smallest slice (5 % SM), so that any GPU
// can be freed in one pass and a pass never churns much more than one
// GPU's worth; once the cluster has been stable for a minute, twice the
// autoscaler's cool-down, so that a function that scales down and up again
// is not moved in between.
var DefaultConsolidateOptions = ConsolidateOptions{MaxMoves: 20, CoolDown: time.Minute}

// Due reports whether a pass may run at now: consolidation is on, the
// cluster is not busy and has been stable for the cool-down since
// lastChange. A caller checks it before building a pass's snapshot.
func (o ConsolidateOptions) Due(now, lastChange time.Time, busy bool) bool {
	return o.MaxMoves > 0 && !busy && now.Sub(lastChange) >= o.CoolDown
}

// Move takes a replica in service from one GPU to another.
type Move struct {
	Replica  string
	From, To string
}

// Consolidation is what one pass decides.
type Consolidation struct {
	// Free are the GPUs the pass empties, least loaded first.
	Free []string
	// Moves bring their replicas in service elsewhere.
	Moves []Move
	// Yield are the warm replicas on them, stopped.
	Yield []string
}

// Empty reports whether the pass changes nothing.
func (c Consolidation) Empty() bool { return len(c.Free) == 0 }

type consGPU struct {
	in      ConsolidateGPU
	sm      int   // SM % of replicas in service
	live    int64 // memory of replicas in service
	warm    int64 // memory of warm replicas, which can be evicted
	serving int   // replicas in service
	fixed   bool
	target  bool // received a move in this pass: not freed by it
	freed   bool
}

// Consolidate finds GPUs whose replicas in service all fit on the other
// GPUs in use, so that moving them frees the GPU: least-loaded GPU first,
// at most MaxMoves moves a pass. A replica fits a target by placement's
// rules (SM % at most 100, memory within the device counting warm
// replicas' memory as evictable), on a GPU of the same product (its slice
// was planned for it); among targets, one that needs no eviction, then the
// best fit (least SM left, then memory), then UUID. Replicas are placed
// largest first. A GPU holding only warm replicas frees with no move.
// Nothing happens while Busy or within CoolDown of LastChange, and a GPU
// holding a Fixed replica is kept.
func Consolidate(in ConsolidateInput, o ConsolidateOptions) Consolidation {
	var out Consolidation
	if !o.Due(in.Now, in.LastChange, in.Busy) {
		return out
	}
	gs := make([]*consGPU, 0, len(in.GPUs))
	for _, g := range in.GPUs {
		cg := &consGPU{in: g}
		for _, r := range g.Replicas {
			if r.Fixed {
				cg.fixed = true
			}
			if r.Warm {
				cg.warm += r.MemoryBytes
				continue
			}
			cg.sm += r.SMPercent
			cg.live += r.MemoryBytes
			cg.serving++
		}
		if len(g.Replicas) > 0 {
			gs = append(gs, cg)
		}
	}
	order := append([]*consGPU(nil), gs...)
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.sm != b.sm {
			return a.sm < b.sm
		}
		if a.live != b.live {
			return a.live < b.live
		}
		return a.in.UUID < b.in.UUID
	})
	left := o.MaxMoves
	for _, src := range order {
		if src.fixed || src.target || src.serving > left {
			continue
		}
		moves, ok := fitElsewhere(src, gs)
		if !ok {
			continue
		}
		src.freed = true
		left -= len(moves)
		out.Free = append(out.Free, src.in.UUID)
		out.Moves = append(out.Moves, moves...)
		for _, r := range src.in.Replicas {
			if r.Warm {
				out.Yield = append(out.Yield, r.ID)
			}
		}
	}
	return out
}

// fitElsewhere places src's replicas in service on the other GPUs in use
// and books them there; it books nothing when one does not fit.
func fitElsewhere(src *consGPU, gs []*consGPU) ([]Move, bool) {
	reps := make([]ConsolidateReplica, 0, src.serving)
	for _, r := range src.in.Replicas {
		if !r.Warm {
			reps = append(reps, r)
		}
	}
	sort.SliceStable(reps, func(i, j int) bool {
		if reps[i].SMPercent != reps[j].SMPercent {
			return reps[i].SMPercent > reps[j].SMPercent
		}
		if reps[i].MemoryBytes != reps[j].MemoryBytes {
			return reps[i].MemoryBytes > reps[j].MemoryBytes
		}
		return reps[i].ID < reps[j].ID
	})
	type booked struct {
		g   *consGPU
		r   ConsolidateReplica
		evi int64
	}
	var done []booked
	undo := func() {
		for _, b := range done {
			b.g.sm -= b.r.SMPercent
			b.g.live -= b.r.MemoryBytes
			b.g.warm += b.evi
		}
	}
	var moves []Move
	for _, r := range reps {
		var best *consGPU
		var bestNoEvict bool
		var bestSM int
		var bestMem int64
		for _, g := range gs {
			if g == src || g.freed || g.serving == 0 || g.in.Product != src.in.Product || g.sm+r.SMPercent > 100 {
				continue
			}
			free := g.in.MemoryBytes - g.live - r.MemoryBytes
			if free < 0 {
				continue
			}
			noEvict := free >= g.warm
			leftSM, leftMem := 100-g.sm-r.SMPercent, free-g.warm
			if !noEvict {
				leftMem = free
			}
			better := best == nil || noEvict && !bestNoEvict ||
				noEvict == bestNoEvict && (leftSM < bestSM || leftSM == bestSM && (leftMem < bestMem || leftMem == bestMem && g.in.UUID < best.in.UUID))
			if better {
				best, bestNoEvict, bestSM, bestMem = g, noEvict, leftSM, leftMem
			}
		}
		if best == nil {
			undo()
			return nil, false
		}
		// Warm memory the move evicts on the target.
		evi := max(best.live+best.warm+r.MemoryBytes-best.in.MemoryBytes, 0)
		best.sm += r.SMPercent
		best.live += r.MemoryBytes
		best.warm -= evi
		done = append(done, booked{best, r, evi})
		moves = append(moves, Move{Replica: r.ID, From: src.in.UUID, To: best.in.UUID})
	}
	for _, b := range done {
		b.g.target = true
	}
	return moves, true
}
