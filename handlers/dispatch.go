package handlers

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// dispatcher queues the requests of functions that serve many models (they
// carry X-Model). A GPU replica runs one request at a time, so when no
// replica suits a request it waits here, and each replica that frees up
// takes the next one: with out-of-order dispatch, the oldest whose model it
// holds, so a later request runs at once instead of waiting behind an
// earlier one that needs a load.
type dispatcher struct {
	resolver ReplicaResolver
	load     *LoadBook
	bound    int64
	o3       bool
	// poll re-checks waiting requests for replicas that appeared since.
	poll time.Duration

	mu     sync.Mutex
	seq    uint64
	queues map[string][]*waiter
}

type waiter struct {
	scheduler.Waiting
	granted chan scheduler.Endpoint // buffered: a grant never blocks
}

func newDispatcher(r ReplicaResolver, load *LoadBook, bound int64, o3 bool) *dispatcher {
	return &dispatcher{resolver: r, load: load, bound: bound, o3: o3, poll: 50 * time.Millisecond, queues: map[string][]*waiter{}}
}

// acquire returns the replica the request runs on, with its in-flight count
// already taken; eps are the function's ready replicas.
func (d *dispatcher) acquire(ctx context.Context, ns, name, model string, eps []scheduler.Endpoint) (scheduler.Endpoint, error) {
	key := ns + "/" + name
	d.mu.Lock()
	if ep, ok := d.pickLocked(key, model, eps); ok {
		ep.InFlight.Add(1)
		d.mu.Unlock()
		return ep, nil
	}
	d.seq++
	w := &waiter{Waiting: scheduler.Waiting{Seq: d.seq, Model: model}, granted: make(chan scheduler.Endpoint, 1)}
	d.queues[key] = append(d.queues[key], w)
	d.reportLocked(key)
	d.mu.Unlock()
	d.drain(ns, name) // a free replica may take it at once

	tick := time.NewTicker(d.poll)
	defer tick.Stop()
	for {
		select {
		case ep := <-w.granted:
			return ep, nil
		case <-tick.C:
			d.drain(ns, name)
		case <-ctx.Done():
			d.mu.Lock()
			d.removeLocked(key, w)
			d.mu.Unlock()
			select {
			case ep := <-w.granted: // granted as we gave up: hand it on
				d.release(ns, name, ep)
			default:
			}
			return scheduler.Endpoint{}, ctx.Err()
		}
	}
}

// pickLocked chooses a replica for a new request, or none to queue it:
// a free replica holding the model; else, unless a busy one holds it and
// fewer than bound requests already wait for the model, a free replica
// that will load it. In order, a request never overtakes queued ones.
func (d *dispatcher) pickLocked(key, model string, eps []scheduler.Endpoint) (scheduler.Endpoint, bool) {
	queued := d.queues[key]
	if len(queued) > 0 && !d.o3 {
		return scheduler.Endpoint{}, false
	}
	var free []scheduler.Endpoint
	busyHolder := false
	for _, ep := range eps {
		if ep.InFlight.Load() == 0 {
			free = append(free, ep)
		} else if d.resolver.Holds(ep.ID, model) {
			busyHolder = true
		}
	}
	// Fewest models first: a load there evicts least and spreads models.
	sort.Slice(free, func(i, j int) bool {
		if free[i].Models != free[j].Models {
			return free[i].Models < free[j].Models
		}
		return free[i].ID < free[j].ID
	})
	for _, ep := range free {
		if d.resolver.Holds(ep.ID, model) {
			return ep, true
		}
	}
	if len(queued) > 0 {
		return scheduler.Endpoint{}, false // only a holder may run ahead of the queue
	}
	waitingForModel := int64(0)
	for _, w := range queued {
		if w.Model == model {
			waitingForModel++
		}
	}
	if busyHolder && waitingForModel < d.bound {
		return scheduler.Endpoint{}, false
	}
	if len(free) > 0 {
		return free[0], true
	}
	return scheduler.Endpoint{}, false
}

// release gives ep back and hands free replicas to waiting requests.
func (d *dispatcher) release(ns, name string, ep scheduler.Endpoint) {
	ep.InFlight.Add(-1)
	d.drain(ns, name)
}

func (d *dispatcher) drain(ns, name string) {
	key := ns + "/" + name
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queues[key]) == 0 {
		return
	}
	eps, err := d.resolver.Replicas(ns, name)
	if err != nil {
		return
	}
	sort.Slice(eps, func(i, j int) bool { return eps[i].ID < eps[j].ID })
	busyHolder := func(m string) bool {
		for _, ep := range eps {
			if ep.InFlight.Load() > 0 && d.resolver.Holds(ep.ID, m) {
				return true
			}
		}
		return false
	}
	for _, ep := range eps {
		queue := d.queues[key]
		if len(queue) == 0 {
			break
		}
		if ep.InFlight.Load() > 0 {
			continue
		}
		waiting := make([]scheduler.Waiting, len(queue))
		for i, w := range queue {
			waiting[i] = w.Waiting
		}
		i := scheduler.NextFor(waiting, scheduler.QueueView{
			Holds:      func(m string) bool { return d.resolver.Holds(ep.ID, m) },
			BusyHolder: busyHolder,
			Bound:      int(d.bound),
			OutOfOrder: d.o3,
		})
		if i < 0 {
			continue
		}
		w := queue[i]
		d.removeLocked(key, w)
		ep.InFlight.Add(1)
		w.granted <- ep
	}
}

func (d *dispatcher) removeLocked(key string, w *waiter) {
	q := d.queues[key]
	for i, x := range q {
		if x == w {
			d.queues[key] = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(d.queues[key]) == 0 {
		delete(d.queues, key)
	}
	d.reportLocked(key)
}

// reportLocked counts in the load book how many requests of the function
// at key (namespace/name) wait now, for the backend's autoscaler.
func (d *dispatcher) reportLocked(key string) {
	ns, name, _ := strings.Cut(key, "/")
	d.load.SetQueued(ns, name, len(d.queues[key]))
}
