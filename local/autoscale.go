package local

import (
	"time"

	"github.com/faas-gpu/faas-gpu/lifecycle"
)

// loop runs Tick every tick and, between ticks, Rise every rise (0 or at
// least tick: none), as lifecycle.Passes schedules them.
func (b *Backend) loop(tick, rise time.Duration) {
	defer close(b.done)
	passes := lifecycle.NewPasses(tick, rise, time.Now())
	t := time.NewTicker(passes.Interval())
	defer t.Stop()
	for {
		select {
		case <-b.closing.Done():
			return
		case now := <-t.C:
			if passes.TickDue(now) {
				b.Tick(now)
			} else {
				b.Rise(now)
			}
		}
	}
}

// Tick runs one pass of the lifecycle core at now, fed with what the
// proxy counted of each function: warm replicas past the warm TTL stop,
// functions with an SLO and a profile (or with scale to zero) autoscale,
// pending replicas are placed.
func (b *Backend) Tick(now time.Time) {
	b.pass(now, b.core.Tick)
}

// Rise runs the core's short pass between ticks at now: replicas added
// where a function's rate rises beyond what its replicas serve.
func (b *Backend) Rise(now time.Time) {
	b.pass(now, b.core.Rise)
}

// pass feeds the core what the proxy counted of each function, runs one
// of its periodic passes at now and carries out its effects.
func (b *Backend) pass(now time.Time, run func(time.Time) lifecycle.Result) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for _, v := range b.core.Functions() {
		var ld lifecycle.Load
		queued := 0
		if b.load != nil {
			ld.Requests, ld.LastRequest, queued = b.load.Load(v.Spec.Namespace(), v.Spec.Name())
			if ms, ok := b.load.(ModelLoadSource); ok {
				ld.Models, ld.Loads = ms.Models(v.Spec.Namespace(), v.Spec.Name())
			}
			if ss, ok := b.load.(SLOLoadSource); ok {
				ld.SLOServed, ld.SLOMissed = ss.SLO(v.Spec.Namespace(), v.Spec.Name())
			}
		}
		ld.Backlog = b.backlogLocked(v, queued)
		b.core.ObserveLoad(v.Key, ld)
	}
	res, _ := b.timed(func() (lifecycle.Result, error) { return run(now), nil })
	_ = b.applyLocked(res, now)
}

// backlogLocked is what waits for function v beyond what its replicas
// serve at once, the autoscaler's Backlog: at each replica in service,
// the requests in flight above its batch size (its emulated worker's
// slots; they wait for the running batch), plus those the proxy queues
// for a replica (queued: X-Model requests its dispatcher holds).
func (b *Backend) backlogLocked(v lifecycle.FunctionView, queued int) float64 {
	n := int64(queued)
	for _, rv := range v.Live {
		if r := b.running[rv.ID]; r != nil {
			n += max(r.inFlight.Load()-int64(max(r.config.Batch, 1)), 0)
		}
	}
	return float64(n)
}
