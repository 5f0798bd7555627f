package handlers

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// LoadBook is the one place a function's load is counted: the proxy
// counts each request as it arrives and each request its dispatcher
// queues for a replica; the backends' autoscalers read it. (In flight at a
// replica is counted by the proxy too, on the replica's own counter, see
// scheduler.Endpoint.InFlight.) Nothing else counts requests, so nothing
// is counted twice.
type LoadBook struct {
	mu  sync.RWMutex
	fns map[string]*functionLoad // key: namespace/name
}

type functionLoad struct {
	requests atomic.Uint64
	last     atomic.Int64 // unix nanoseconds of the last request
	queued   atomic.Int64
	loads    atomic.Uint64 // model loads its replicas reported (X-Faas-Gpu-Cache)
	// sloServed and sloMissed count its requests with an SLO that
	// finished, and those that missed it (sloMissed).
	sloServed, sloMissed atomic.Uint64

	mu     sync.Mutex
	models map[string]uint64 // requests by X-Model
}

// maxModelsCounted bounds the models counted for one function: X-Model is
// the client's, and a client naming a new model in every request must not
// grow the book without bound. Past it, new models are not counted (the
// autoscaler plans for those it knows).
const maxModelsCounted = 256

// NewLoadBook is an empty book.
func NewLoadBook() *LoadBook { return &LoadBook{fns: map[string]*functionLoad{}} }

// of is the function's entry, made on first use.
func (b *LoadBook) of(ns, name string) *functionLoad {
	if l, ok := b.lookup(ns, name); ok {
		return l
	}
	k := ns + "/" + name
	b.mu.Lock()
	defer b.mu.Unlock()
	l, ok := b.fns[k]
	if !ok {
		l = &functionLoad{}
		b.fns[k] = l
	}
	return l
}

// lookup is the function's entry if it has one, without making it. The
// key is built in a stack buffer: a map lookup with string(bytes) does
// not allocate, and every request comes here.
func (b *LoadBook) lookup(ns, name string) (*functionLoad, bool) {
	var buf [128]byte
	k := append(append(append(buf[:0], ns...), '/'), name...)
	b.mu.RLock()
	l, ok := b.fns[string(k)]
	b.mu.RUnlock()
	return l, ok
}

// Request counts one request of function ns/name arriving at now.
func (b *LoadBook) Request(ns, name string, now time.Time) {
	l := b.of(ns, name)
	l.requests.Add(1)
	l.last.Store(now.UnixNano())
}

// RequestModel counts one request of function ns/name naming model
// (X-Model), for the autoscaler's model mix (lifecycle.Load.Models).
func (b *LoadBook) RequestModel(ns, name, model string) {
	l := b.of(ns, name)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.models == nil {
		l.models = map[string]uint64{}
	}
	if _, ok := l.models[model]; ok || len(l.models) < maxModelsCounted {
		l.models[model]++
	}
}

// Loaded counts one model load by a replica of function ns/name (a
// response with X-Faas-Gpu-Cache miss or node-hit).
func (b *LoadBook) Loaded(ns, name string) { b.of(ns, name).loads.Add(1) }

// Models is a copy of function ns/name's requests by model (nil: none
// named one) and its model loads so far.
func (b *LoadBook) Models(ns, name string) (map[string]uint64, uint64) {
	l, ok := b.lookup(ns, name)
	if !ok {
		return nil, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.models) == 0 {
		return nil, l.loads.Load()
	}
	return maps.Clone(l.models), l.loads.Load()
}

// Completed counts one request of function ns/name with an SLO that
// finished; missed: over the SLO, failed or refused.
func (b *LoadBook) Completed(ns, name string, missed bool) {
	l := b.of(ns, name)
	l.sloServed.Add(1)
	if missed {
		l.sloMissed.Add(1)
	}
}

// SLO is how many of function ns/name's requests with an SLO finished so
// far, and how many of them missed it (lifecycle.Load.SLOServed).
func (b *LoadBook) SLO(ns, name string) (served, missed uint64) {
	l, ok := b.lookup(ns, name)
	if !ok {
		return 0, 0
	}
	return l.sloServed.Load(), l.sloMissed.Load()
}

// SetQueued records that n requests of function ns/name wait in the
// proxy for a replica now.
func (b *LoadBook) SetQueued(ns, name string, n int) { b.of(ns, name).queued.Store(int64(n)) }

// Load is what the proxy counted of a function: every request so far, when
// the last one arrived (zero: none) and how many wait in the proxy for a
// replica now.
func (b *LoadBook) Load(ns, name string) (requests uint64, last time.Time, queued int) {
	l, ok := b.lookup(ns, name)
	if !ok {
		return 0, time.Time{}, 0
	}
	if ns := l.last.Load(); ns != 0 {
		last = time.Unix(0, ns)
	}
	return l.requests.Load(), last, int(l.queued.Load())
}

// Forget drops a deleted function's counts (a Forgetter of the delete
// handler), so a function deployed again under its name starts from zero.
func (b *LoadBook) Forget(ns, name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.fns, ns+"/"+name)
}
