package sim

import (
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// dispatchMode is how a central queue hands requests to workers.
type dispatchMode uint8

const (
	// dispatchLB ignores the cache: the next free worker, round robin.
	dispatchLB dispatchMode = iota
	// dispatchLALB prefers a worker holding the model, in arrival order.
	dispatchLALB
	// dispatchO3 is LALB with out-of-order dispatch.
	dispatchO3
)

// dispatcher is a central request queue in front of workers that run one
// request at a time and cache models in GPU memory: the scheduler of the
// GPU-enabled FaaS paper (Zhao, Jha, Hong, arXiv 2303.05601; research notes
// §2.2) and the provider's X-Model dispatcher (handlers/dispatch.go), whose
// rules it follows with the scheduler package's LocalityAware and NextFor:
//
//   - LB: a request goes to the next free worker in round-robin order,
//     whatever it caches; with none free it waits, first in first out.
//   - LALB: a free worker holding the model takes it. Otherwise, when a
//     busy worker holds the model and fewer than bound requests for that
//     model already wait, it waits for that worker; else a free worker
//     loads the model: the one holding fewest models, so loads evict least
//     and models spread. Requests leave the queue in arrival order, and the
//     head applies the same bound: with more than bound requests for its
//     model queued it loads the model on a free worker instead of waiting.
//     (NextFor alone, in order, lets the head wait for a busy holder
//     without bound: one worker would then serve a popular model however
//     long its queue, which is not the paper's load balancing; the bound
//     goes in through the QueueView's BusyHolder.)
//   - LALB+O3: as LALB, but a worker that frees up takes the oldest
//     waiting request whose model it holds, ahead of older ones that would
//     need a load, and an arriving request may overtake the queue when a
//     free worker holds its model.
type dispatcher struct {
	mode  dispatchMode
	bound int
	// q[head:] is the queue, oldest first; Seq is the request number.
	// Removing near either end is cheap, so an overloaded queue of a
	// million requests stays fast.
	q        []scheduler.Waiting
	head     int
	perModel map[string]int // queued requests per model
	// late is how many requests lead the queue late (scheduler.LateAfter;
	// the faas-gpu policy's, which keeps them late for good).
	late  int
	rr    int
	cands []scheduler.Candidate
	free  []*replica
}

func (d *dispatcher) queue() []scheduler.Waiting { return d.q[d.head:] }

// removeAt takes the i-th queued request out, shifting the shorter side.
func (d *dispatcher) removeAt(i int) int32 {
	w := d.q[d.head+i]
	if i < d.late {
		d.late--
	}
	if n := len(d.q) - d.head; i < n/2 {
		copy(d.q[d.head+1:d.head+i+1], d.q[d.head:d.head+i])
		d.q[d.head] = scheduler.Waiting{}
		d.head++
	} else {
		copy(d.q[d.head+i:], d.q[d.head+i+1:])
		d.q = d.q[:len(d.q)-1]
	}
	if d.head == len(d.q) {
		d.q, d.head = d.q[:0], 0
	} else if d.head >= 1024 && 2*d.head >= len(d.q) {
		d.q = d.q[:copy(d.q, d.q[d.head:])]
		d.head = 0
	}
	if d.perModel[w.Model]--; d.perModel[w.Model] == 0 {
		delete(d.perModel, w.Model)
	}
	return int32(w.Seq)
}

func (d *dispatcher) modelOf(e *Engine, n int32) string {
	return e.models[e.wl.Arrivals[n].Model].name
}

func (d *dispatcher) enqueue(e *Engine, n int32) {
	m := d.modelOf(e, n)
	d.q = append(d.q, scheduler.Waiting{Seq: uint64(n), Model: m})
	if d.perModel == nil {
		d.perModel = map[string]int{}
	}
	d.perModel[m]++
}

func (d *dispatcher) queued() int { return len(d.q) - d.head }

func isFree(r *replica) bool { return r.state == repServing && !r.busy }

// arrive handles request n; workers are in a fixed (ID) order.
func (d *dispatcher) arrive(e *Engine, workers []*replica, n int32) {
	if d.mode == dispatchLB {
		if d.queued() == 0 {
			if w := d.nextRoundRobin(workers); w != nil {
				e.serve(w, []int32{n})
				return
			}
		}
		d.enqueue(e, n)
		return
	}
	if d.queued() > 0 && d.mode != dispatchO3 {
		d.enqueue(e, n)
		return
	}
	model := d.modelOf(e, n)
	d.free, d.cands = d.free[:0], d.cands[:0]
	held := false
	for _, w := range workers {
		if isFree(w) {
			h := e.cache.Holds(w.id, model)
			held = held || h
			d.free = append(d.free, w)
			d.cands = append(d.cands, scheduler.Candidate{ID: w.id, Holds: h})
		}
	}
	if !held {
		// A miss: the fewest models breaks ties (counted only now, as
		// listing a worker's models costs an allocation).
		for i, w := range d.free {
			d.cands[i].Models = len(e.cache.Models(w.id))
		}
	}
	// Bound 1: only an idle holder counts as a hit (workers run one
	// request at a time); otherwise the free worker holding fewest models.
	i := scheduler.LocalityAware(d.cands, 1)
	switch {
	case i >= 0 && d.cands[i].Holds:
		e.serve(d.free[i], []int32{n})
	case d.queued() > 0: // out of order, only a holder may overtake
		d.enqueue(e, n)
	case d.busyHolder(e, workers, model) && d.waitingFor(model) < d.bound:
		d.enqueue(e, n)
	case i >= 0:
		e.serve(d.free[i], []int32{n})
	default:
		d.enqueue(e, n)
	}
}

func (d *dispatcher) nextRoundRobin(workers []*replica) *replica {
	for k := range workers {
		i := (d.rr + k) % len(workers)
		if isFree(workers[i]) {
			d.rr = i + 1
			return workers[i]
		}
	}
	return nil
}

func (d *dispatcher) busyHolder(e *Engine, workers []*replica, model string) bool {
	for _, w := range workers {
		if w.busy && w.state == repServing && e.cache.Holds(w.id, model) {
			return true
		}
	}
	return false
}

func (d *dispatcher) waitingFor(model string) int { return d.perModel[model] }

// drain hands waiting requests to free workers, as the provider does
// whenever a replica frees up.
func (d *dispatcher) drain(e *Engine, workers []*replica) {
	if d.mode == dispatchLB {
		for d.queued() > 0 {
			w := d.nextRoundRobin(workers)
			if w == nil {
				return
			}
			e.serve(w, []int32{d.removeAt(0)})
		}
		return
	}
	// What a free worker holding none of the queued models may take does
	// not depend on the worker: ask NextFor once per change of the queue
	// (a million-request queue is not scanned once per worker).
	const unknown = -2
	forNonHolder := unknown
	busyHolder := func(m string) bool { return d.busyHolder(e, workers, m) }
	if d.mode == dispatchLALB {
		busyHolder = func(m string) bool { return d.busyHolder(e, workers, m) && d.waitingFor(m) <= d.bound }
	}
	view := scheduler.QueueView{BusyHolder: busyHolder, Bound: d.bound, OutOfOrder: d.mode == dispatchO3}
	for _, w := range workers {
		if d.queued() == 0 {
			return
		}
		if !isFree(w) {
			continue
		}
		var i int
		if d.holdsQueued(e, w) {
			view.Holds = func(m string) bool { return e.cache.Holds(w.id, m) }
			i = scheduler.NextFor(d.queue(), view)
		} else {
			if forNonHolder == unknown {
				view.Holds = func(string) bool { return false }
				forNonHolder = scheduler.NextFor(d.queue(), view)
			}
			i = forNonHolder
		}
		if i < 0 {
			continue
		}
		e.serve(w, []int32{d.removeAt(i)})
		forNonHolder = unknown
	}
}

// holdsQueued reports whether w holds the model of any queued request.
func (d *dispatcher) holdsQueued(e *Engine, w *replica) bool {
	for m := range d.perModel {
		if e.cache.Holds(w.id, m) {
			return true
		}
	}
	return false
}
