package sim

import "time"

// evKind says what an event does when its time comes.
type evKind uint8

const (
	// evArrival: workload request number n arrives.
	evArrival evKind = iota
	// evDone: replica rep finishes the batch it started (stale if gen
	// differs from the replica's).
	evDone
	// evReady: replica rep finished starting (container and model load).
	evReady
	// evTick: the policy's periodic decision (autoscaler).
	evTick
	// evSample: record one point of the time series.
	evSample
	// evShare: the next completion on a time-shared GPU (stale if gen
	// differs from the GPU's).
	evShare
	// evLoaded: replica rep finished loading a model and starts computing
	// (time-shared GPUs only; elsewhere load and compute are one event).
	evLoaded
	// evContend: replica rep's batch completes under the contention model
	// (stale if gen differs from the replica's plan, cgen).
	evContend
	// evParked: the parked process named by rep (a placeholder holding
	// only its ID) has started (Options.Parked).
	evParked
	// evModelLoaded: replica rep finished loading model n in its idle
	// time (lifecycle.LoadModel), beside what it served meanwhile.
	evModelLoaded
)

// event is one thing that happens at a virtual time. It is a value, not an
// interface, so the queue allocates nothing per event.
type event struct {
	at   time.Duration
	seq  uint64 // insertion order: equal times pop first-in first-out
	kind evKind
	n    int32
	gen  uint64
	rep  *replica
	gpu  *gpuState
}

// eventQueue is a binary min-heap on (at, seq). Breaking ties by insertion
// order makes a run deterministic: two events at the same instant always
// run in the order they were scheduled.
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) Len() int { return len(q.h) }

func (q *eventQueue) less(i, j int) bool {
	if q.h[i].at != q.h[j].at {
		return q.h[i].at < q.h[j].at
	}
	return q.h[i].seq < q.h[j].seq
}

func (q *eventQueue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	i := len(q.h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	top := q.h[0]
	last := len(q.h) - 1
	q.h[0] = q.h[last]
	q.h[last] = event{} // drop pointers for the garbage collector
	q.h = q.h[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < last && q.less(l, m) {
			m = l
		}
		if r < last && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
