package handlers

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// dispatcher holds every function's requests and hands each to a replica
// when the replica can start it (scheduler.Pull): fewer in flight than its
// slice's batch size, the one that would complete it soonest, with LALB's
// model-locality rules for X-Model requests. A request no replica can
// start now waits in its function's queue, oldest first, until one can:
// when a request ends, or when the poll finds replicas that became ready
// since (a replica that has just started takes from the queue that built
// while it started). A request that can no longer meet its function's
// SLO waits behind those that still can (scheduler.LateAfter).
type dispatcher struct {
	resolver ReplicaResolver
	load     *LoadBook
	metrics  *ProxyMetrics
	// locality applies the model rules to X-Model requests (RouteLocality).
	locality bool
	bound    int
	o3       bool
	// loadSeconds is the resolver's ModelLoadTimer, where it is one.
	loadSeconds func(model string) float64
	// max is how many requests of one function may wait (0: no bound);
	// one more is refused with 429.
	max int
	// poll re-checks waiting requests for replicas that appeared since.
	poll time.Duration

	mu  sync.RWMutex
	fns map[string]*fnQueue // namespace/name
}

// fnQueue is one function's waiting requests and what its dispatch reuses.
type fnQueue struct {
	ns, name string
	// pending counts requests between arriving and being handed a
	// replica. A release reads it without the lock: when it is 0 nobody
	// can be waiting for the slot the release frees (an arrival counts
	// itself before it reads the replicas' in-flight counts).
	pending atomic.Int64

	mu sync.Mutex
	// queue and waiters are parallel, oldest first.
	queue   []scheduler.Waiting
	waiters []*waiter
	seq     uint64
	polling bool
	// slo is the function's SLO as its last request saw it (0: none).
	slo    time.Duration
	slots  []scheduler.Slot
	grants []scheduler.Grant
	// order and ordered are the queue's on-time requests, then its late
	// ones: indices into queue, and the requests.
	order   []int
	ordered []scheduler.Waiting
}

type waiter struct {
	since time.Time
	// late: it has waited too long to meet the SLO (scheduler.LateAfter),
	// and stays late.
	late    bool
	granted chan scheduler.Endpoint // buffered: a grant never blocks
}

// errQueueFull is a request refused because its function's queue is full;
// retryAfter is when the queue is expected to have drained.
type errQueueFull struct{ retryAfter time.Duration }

func (e *errQueueFull) Error() string { return "the function's queue is full" }

func newDispatcher(r ReplicaResolver, load *LoadBook, metrics *ProxyMetrics, locality bool, bound int, o3 bool, max int) *dispatcher {
	d := &dispatcher{resolver: r, load: load, metrics: metrics, locality: locality, bound: bound, o3: o3, max: max,
		poll: 50 * time.Millisecond, fns: map[string]*fnQueue{}}
	if lt, ok := r.(ModelLoadTimer); ok {
		d.loadSeconds = lt.ModelLoadSeconds
	}
	return d
}

// queueOf is function ns/name's queue, made on first use; the key is
// built in a stack buffer, as a map lookup with string(bytes) does not
// allocate.
func (d *dispatcher) queueOf(ns, name string) *fnQueue {
	var buf [128]byte
	k := append(append(append(buf[:0], ns...), '/'), name...)
	d.mu.RLock()
	q := d.fns[string(k)]
	d.mu.RUnlock()
	if q != nil {
		return q
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if q = d.fns[string(k)]; q == nil {
		q = &fnQueue{ns: ns, name: name}
		d.fns[string(k)] = q
	}
	return q
}

// acquire returns the replica the request runs on, with its in-flight count
// already taken; eps are the function's ready replicas and model the
// request's X-Model ("": none) and slo its function's SLO (0: none). It
// waits in the function's queue until a replica can start the request or
// ctx ends; with the queue full it returns an *errQueueFull at once.
func (d *dispatcher) acquire(ctx context.Context, q *fnQueue, model string, slo time.Duration, eps []scheduler.Endpoint, start time.Time) (scheduler.Endpoint, error) {
	q.pending.Add(1)
	q.mu.Lock()
	q.slo = slo
	q.seq++
	q.queue = append(q.queue, scheduler.Waiting{Seq: q.seq, Model: model})
	q.waiters = append(q.waiters, nil) // nil: this request, not yet waiting
	me := len(q.queue) - 1
	if ep, ok := d.dispatchLocked(q, eps, me); ok {
		q.mu.Unlock()
		d.metrics.observeQueue(q.ns, q.name, 0)
		return ep, nil
	}
	me = len(q.queue) - 1 // still the last, with older ones granted before it
	if d.max > 0 && len(q.queue) > d.max {
		q.queue, q.waiters = q.queue[:me], q.waiters[:me]
		retry := retryAfter(len(q.queue), eps)
		q.mu.Unlock()
		q.pending.Add(-1)
		return scheduler.Endpoint{}, &errQueueFull{retryAfter: retry}
	}
	w := &waiter{since: start, granted: make(chan scheduler.Endpoint, 1)}
	q.waiters[me] = w
	d.reportLocked(q)
	if !q.polling {
		q.polling = true
		go d.pollWhileWaiting(q)
	}
	q.mu.Unlock()

	select {
	case ep := <-w.granted:
		return ep, nil
	case <-ctx.Done():
		q.mu.Lock()
		removed := d.removeLocked(q, w)
		q.mu.Unlock()
		if removed {
			q.pending.Add(-1)
		} else { // granted as we gave up: hand it on
			d.release(q, <-w.granted)
		}
		return scheduler.Endpoint{}, ctx.Err()
	}
}

// dispatchLocked hands the queue's requests to the replicas that can start
// them now (scheduler.Pull). The request at index me, if any, is the
// caller's own: it is not sent a grant but its replica is returned.
func (d *dispatcher) dispatchLocked(q *fnQueue, eps []scheduler.Endpoint, me int) (scheduler.Endpoint, bool) {
	if len(q.queue) == 0 || len(eps) == 0 {
		return scheduler.Endpoint{}, false
	}
	q.slots = q.slots[:0]
	for _, ep := range eps {
		q.slots = append(q.slots, ep.Slot())
	}
	view := scheduler.PullView{Bound: d.bound, OutOfOrder: d.o3}
	if d.locality && anyModel(q.queue) {
		view.Holds = func(i int, m string) bool { return d.resolver.Holds(eps[i].ID, m) }
		view.LoadSeconds, view.SLO = d.loadSeconds, q.slo.Seconds()
	}
	now := time.Now()
	if !d.pullLateLastLocked(q, view, now) {
		q.grants = scheduler.Pull(q.queue, q.slots, view, q.grants[:0])
	}
	if len(q.grants) == 0 {
		return scheduler.Endpoint{}, false
	}
	var mine scheduler.Endpoint
	got := false
	for _, g := range q.grants {
		ep := eps[g.Slot]
		ep.InFlight.Add(1)
		if g.Request == me {
			mine, got = ep, true
			continue
		}
		w := q.waiters[g.Request]
		d.metrics.observeQueue(q.ns, q.name, now.Sub(w.since))
		w.granted <- ep
		q.waiters[g.Request] = nil
	}
	q.pending.Add(-int64(len(q.grants)))
	if got {
		q.waiters[me] = nil
	}
	// Keep what is left, in order. A nil waiter was granted, but the
	// caller's own request (me) stays when it was not.
	n := 0
	for i := range q.queue {
		if q.waiters[i] != nil || i == me && !got {
			q.queue[n], q.waiters[n] = q.queue[i], q.waiters[i]
			n++
		}
	}
	clear(q.waiters[n:])
	q.queue, q.waiters = q.queue[:n], q.waiters[:n]
	d.reportLocked(q)
	return mine, got
}

// pullLateLastLocked grants the queue's on-time requests first and its
// late ones (scheduler.LateAfter) what they leave, in the order
// scheduler.LateLast gives, as the simulator does; false: none is late,
// and the queue goes to Pull as it is. The caller's own request, which
// has no waiter yet, has just arrived: it is on time.
func (d *dispatcher) pullLateLastLocked(q *fnQueue, view scheduler.PullView, now time.Time) bool {
	after, ok := scheduler.LateAfter(q.slo, q.slots)
	if !ok {
		return false
	}
	// Oldest first, so the late requests lead the queue: the scan ends at
	// the first one still on time (or the caller's own, last), and a
	// queue with none late costs the proxy one look, not a pass.
	late := 0
	for _, w := range q.waiters {
		if w == nil {
			break
		}
		if !w.late {
			if now.Sub(w.since) <= after {
				break
			}
			w.late = true
		}
		late++
	}
	if late == 0 {
		return false
	}
	q.ordered, q.order = scheduler.LateLast(q.queue, late, len(q.queue), q.ordered, q.order)
	q.grants = scheduler.Pull(q.ordered, q.slots, view, q.grants[:0])
	for i := range q.grants {
		q.grants[i].Request = q.order[q.grants[i].Request]
	}
	return true
}

func anyModel(queue []scheduler.Waiting) bool {
	for _, w := range queue {
		if w.Model != "" {
			return true
		}
	}
	return false
}

// release gives ep back and hands the slot to a waiting request, if any.
// It is the hot path of every request: with nothing waiting it is one
// atomic add and one load.
func (d *dispatcher) release(q *fnQueue, ep scheduler.Endpoint) {
	ep.InFlight.Add(-1)
	if q.pending.Load() > 0 {
		d.drain(q)
	}
}

// drain hands free replicas to waiting requests, with the function's
// replicas as they are now.
func (d *dispatcher) drain(q *fnQueue) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		return
	}
	eps, err := d.resolver.Replicas(q.ns, q.name)
	if err != nil {
		return
	}
	d.dispatchLocked(q, eps, -1)
}

// pollWhileWaiting re-checks the queue for replicas that became ready
// since (nothing else tells the proxy), for as long as requests wait.
func (d *dispatcher) pollWhileWaiting(q *fnQueue) {
	tick := time.NewTicker(d.poll)
	defer tick.Stop()
	for range tick.C {
		d.drain(q)
		q.mu.Lock()
		if len(q.queue) == 0 {
			q.polling = false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
}

// removeLocked takes w out of the queue; false: it is not there (granted).
func (d *dispatcher) removeLocked(q *fnQueue, w *waiter) bool {
	for i, x := range q.waiters {
		if x == w {
			n := len(q.queue) - 1
			copy(q.queue[i:], q.queue[i+1:])
			copy(q.waiters[i:], q.waiters[i+1:])
			q.waiters[n] = nil
			q.queue, q.waiters = q.queue[:n], q.waiters[:n]
			d.reportLocked(q)
			return true
		}
	}
	return false
}

// reportLocked counts in the load book, for the backend's autoscaler, and
// in the metrics how many of the function's requests wait now.
func (d *dispatcher) reportLocked(q *fnQueue) {
	d.load.SetQueued(q.ns, q.name, len(q.queue))
	d.metrics.setQueued(q.ns, q.name, len(q.queue))
}

// retryAfter estimates when a queue of n requests will have drained: n
// over the replicas' summed throughput, in whole seconds, at least 1 (and
// 1 when no replica's speed is known).
func retryAfter(n int, eps []scheduler.Endpoint) time.Duration {
	rate := 0.0
	for _, ep := range eps {
		if ep.Batch > 0 && ep.Throughput > 0 {
			rate += ep.Throughput
		}
	}
	secs := 1.0
	if rate > 0 {
		secs = max(math.Ceil(float64(n)/rate), 1)
	}
	return time.Duration(secs) * time.Second
}

// asQueueFull is err's *errQueueFull, if it is one.
func asQueueFull(err error) (*errQueueFull, bool) {
	var full *errQueueFull
	return full, errors.As(err, &full)
}
