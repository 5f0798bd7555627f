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
	// is never freed. A fixed warm replica (a bursty function's next
	// capacity, a model cache) also keeps its memory on a target: a move
	// evicting it would undo the hold that keeps its own GPU.
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
	// MaxRepack is the most moves among the other GPUs a pass makes to
	// make room for a GPU that cannot be freed as things stand; 0 only
	// frees GPUs whose replicas fit the others' room as it is.
	MaxRepack int
}

// DefaultConsolidateOptions move at most 20 replicas a pass, as many as
// one GPU holds at the profiles' smallest slice (5 % SM), so that any GPU
// can be freed in one pass and a pass never churns much more than one
// GPU's worth; once the cluster has been stable for a minute, twice the
// autoscaler's cool-down, so that a function that scales down and up again
// is not moved in between.
//
// At most 2 repacking moves: one is what a GPU held back by fragmented
// room (two GPUs with room that only together fit its replicas) usually
// needs, and the search grows as the power of it.
var DefaultConsolidateOptions = ConsolidateOptions{MaxMoves: 20, CoolDown: time.Minute, MaxRepack: 2}

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
	// Room, when set, is the GPU that Moves make room to free: no GPU
	// could be freed as things stand, so the pass only moves replicas
	// among the others (Free is empty) and a later pass frees it once
	// the moves are done. Make before break keeps a moved replica's old
	// booking until its new one is ready, so room a move makes cannot be
	// used in the same pass.
	Room string
}

// Empty reports whether the pass changes nothing.
func (c Consolidation) Empty() bool { return len(c.Free) == 0 && len(c.Moves) == 0 }

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
// holding a Fixed replica is kept. Where no GPU can be freed, the pass
// may instead make at most MaxRepack moves among the other GPUs after
// which one can (repack; Consolidation.Room).
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
			if r.Warm && r.Fixed {
				// Held: its memory is as taken as a replica's in
				// service. Eviction let on/off family13's w05 pack
				// replicas onto warm ones its off periods kept, and its
				// next on period waited out cold starts: 3.71 % of
				// requests missed, 1.45 % with the hold kept
				// (docs/evaluation.md, "Warm replicas held against
				// moves").
				cg.live += r.MemoryBytes
				continue
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
		moves, ok := fitElsewhere(src, gs, false)
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
	if len(out.Free) == 0 && o.MaxRepack > 0 {
		for _, src := range order {
			if src.fixed || src.serving > o.MaxMoves || src.serving == 0 {
				continue
			}
			// The repacking moves are within the pass's move budget too.
			if moves, ok := repack(src, gs, min(o.MaxRepack, o.MaxMoves)); ok {
				out.Moves, out.Room = moves, src.in.UUID
				break
			}
		}
	}
	return out
}

// repack looks for at most k moves of replicas in service among the GPUs
// other than src after which src's replicas fit elsewhere (fitElsewhere);
// each move's replica keeps its booking on its own GPU until it is done,
// so it needs room on its target as things stand. It returns the first
// found, fewest moves first, then smallest replicas first (least to
// reload), then best fit; it leaves gs as it found them.
func repack(src *consGPU, gs []*consGPU, k int) ([]Move, bool) {
	// The room elsewhere must at least add up to src's load.
	var roomSM int
	var roomMem int64
	for _, g := range gs {
		if g != src && g.serving > 0 && g.in.Product == src.in.Product {
			roomSM += 100 - g.sm
			roomMem += g.in.MemoryBytes - g.live
		}
	}
	if roomSM < src.sm || roomMem < src.live {
		return nil, false
	}
	type cand struct {
		g *consGPU
		r ConsolidateReplica
	}
	var cands []cand
	for _, g := range gs {
		if g == src || g.serving == 0 || g.in.Product != src.in.Product {
			continue
		}
		for _, r := range g.in.Replicas {
			if !r.Warm && !r.Fixed {
				cands = append(cands, cand{g, r})
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i].r, cands[j].r
		if a.SMPercent != b.SMPercent {
			return a.SMPercent < b.SMPercent
		}
		if a.MemoryBytes != b.MemoryBytes {
			return a.MemoryBytes < b.MemoryBytes
		}
		return a.ID < b.ID
	})
	// moved[i]: candidate i is moved (a replica moves at most once).
	moved := make([]bool, len(cands))
	// A move books its target at once, but leaves its own GPU only once
	// it is done: the room it makes counts for the check that src then
	// fits, not for the pass's other moves.
	var try func(depth int, moves []Move) ([]Move, bool)
	try = func(depth int, moves []Move) ([]Move, bool) {
		if depth == 0 {
			for i, c := range cands {
				if moved[i] {
					c.g.sm -= c.r.SMPercent
					c.g.live -= c.r.MemoryBytes
				}
			}
			_, ok := fitElsewhere(src, gs, true)
			for i, c := range cands {
				if moved[i] {
					c.g.sm += c.r.SMPercent
					c.g.live += c.r.MemoryBytes
				}
			}
			if ok {
				return moves, true
			}
			return nil, false
		}
		for i, c := range cands {
			if moved[i] {
				continue
			}
			for _, h := range targets(c.r, c.g, src, gs) {
				evi := max(h.live+h.warm+c.r.MemoryBytes-h.in.MemoryBytes, 0)
				h.sm += c.r.SMPercent
				h.live += c.r.MemoryBytes
				h.warm -= evi
				moved[i] = true
				got, ok := try(depth-1, append(moves, Move{Replica: c.r.ID, From: c.g.in.UUID, To: h.in.UUID}))
				moved[i] = false
				h.sm -= c.r.SMPercent
				h.live -= c.r.MemoryBytes
				h.warm += evi
				if ok {
					return got, true
				}
			}
		}
		return nil, false
	}
	for n := 1; n <= k; n++ {
		if moves, ok := try(n, nil); ok {
			return moves, true
		}
	}
	return nil, false
}

// targets are the GPUs r may move to from its GPU from, not src: in use,
// of the same product, with room for it as placement counts it; best fit
// first (no eviction, least SM left, then memory, then UUID).
func targets(r ConsolidateReplica, from, src *consGPU, gs []*consGPU) []*consGPU {
	type t struct {
		g       *consGPU
		noEvict bool
		sm      int
		mem     int64
	}
	var ts []t
	for _, g := range gs {
		if g == from || g == src || g.freed || g.serving == 0 || g.in.Product != from.in.Product || g.sm+r.SMPercent > 100 {
			continue
		}
		free := g.in.MemoryBytes - g.live - r.MemoryBytes
		if free < 0 {
			continue
		}
		noEvict := free >= g.warm
		leftMem := free
		if noEvict {
			leftMem = free - g.warm
		}
		ts = append(ts, t{g, noEvict, 100 - g.sm - r.SMPercent, leftMem})
	}
	sort.SliceStable(ts, func(i, j int) bool {
		a, b := ts[i], ts[j]
		if a.noEvict != b.noEvict {
			return a.noEvict
		}
		if a.sm != b.sm {
			return a.sm < b.sm
		}
		if a.mem != b.mem {
			return a.mem < b.mem
		}
		return a.g.in.UUID < b.g.in.UUID
	})
	out := make([]*consGPU, len(ts))
	for i, x := range ts {
		out[i] = x.g
	}
	return out
}

// fitElsewhere places src's replicas in service on the other GPUs in use
// and books them there; it books nothing when one does not fit, nor when
// dry (a check only).
func fitElsewhere(src *consGPU, gs []*consGPU, dry bool) ([]Move, bool) {
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
	if dry {
		undo()
		return moves, true
	}
	for _, b := range done {
		b.g.target = true
	}
	return moves, true
}
