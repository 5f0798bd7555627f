package local

import (
	"time"

	"github.com/faas-gpu/faas-gpu/lifecycle"
)

func (b *Backend) loop(every time.Duration) {
	defer close(b.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case now := <-t.C:
			b.Tick(now)
		}
	}
}

// Tick runs one pass of the lifecycle core at now, fed with what the
// proxy counted of each function: warm replicas past the warm TTL stop,
// functions with an SLO and a profile (or with scale to zero) autoscale,
// pending replicas are placed.
func (b *Backend) Tick(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for k, l := range b.loads {
		ld := lifecycle.Load{Requests: l.requests.Load(), Backlog: b.backlogLocked(k)}
		if ns := l.lastRequest.Load(); ns != 0 {
			ld.LastRequest = time.Unix(0, ns)
		}
		b.core.ObserveLoad(k, ld)
	}
	res, _ := b.timed(func() (lifecycle.Result, error) { return b.core.Tick(now), nil })
	_ = b.applyLocked(res, now)
}

// backlogLocked is what waits for function k beyond what its replicas
// serve at once, the autoscaler's Backlog: at each replica in service,
// the requests in flight above its batch size (its emulated worker's
// slots; they wait for the running batch), plus those the proxy's
// dispatcher queues for a replica (X-Model requests, see Queued).
func (b *Backend) backlogLocked(k string) float64 {
	n := int64(0)
	if v, ok := b.core.Function(k); ok {
		for _, rv := range v.Live {
			if r := b.running[rv.ID]; r != nil {
				n += max(r.inFlight.Load()-int64(max(r.config.Batch, 1)), 0)
			}
		}
	}
	b.waitingMu.Lock()
	n += int64(b.waiting[k])
	b.waitingMu.Unlock()
	return float64(n)
}

// Queued is told by the proxy's dispatcher how many requests of a function
// wait for a replica (handlers.QueueObserver), each time that changes; the
// autoscaler counts them in the function's backlog.
func (b *Backend) Queued(namespace, name string, waiting int) {
	b.waitingMu.Lock()
	defer b.waitingMu.Unlock()
	if waiting <= 0 {
		delete(b.waiting, key(namespace, name))
		return
	}
	b.waiting[key(namespace, name)] = waiting
}
