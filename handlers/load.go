package handlers

import (
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
}

// NewLoadBook is an empty book.
func NewLoadBook() *LoadBook { return &LoadBook{fns: map[string]*functionLoad{}} }

// of is the function's entry, made on first use. The key is built in a
// stack buffer: a map lookup with string(bytes) does not allocate.
func (b *LoadBook) of(ns, name string) *functionLoad {
	var buf [128]byte
	k := append(append(append(buf[:0], ns...), '/'), name...)
	b.mu.RLock()
	l, ok := b.fns[string(k)]
	b.mu.RUnlock()
	if ok {
		return l
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if l, ok = b.fns[string(k)]; !ok {
		l = &functionLoad{}
		b.fns[string(k)] = l
	}
	return l
}

// Request counts one request of function ns/name arriving at now.
func (b *LoadBook) Request(ns, name string, now time.Time) {
	l := b.of(ns, name)
	l.requests.Add(1)
	l.last.Store(now.UnixNano())
}

// SetQueued records that n requests of function ns/name wait in the
// proxy for a replica now.
func (b *LoadBook) SetQueued(ns, name string, n int) { b.of(ns, name).queued.Store(int64(n)) }

// Load is what the proxy counted of a function: every request so far, when
// the last one arrived (zero: none) and how many wait in the proxy for a
// replica now.
func (b *LoadBook) Load(ns, name string) (requests uint64, last time.Time, queued int) {
	var buf [128]byte
	k := append(append(append(buf[:0], ns...), '/'), name...)
	b.mu.RLock()
	l, ok := b.fns[string(k)]
	b.mu.RUnlock()
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
