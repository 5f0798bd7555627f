package local

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
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

// Tick runs one autoscaler pass at now: it smooths each function's request
// rate, applies the autoscaler's decision to functions with an SLO and a
// profile (or with scale-to-zero), and stops warm replicas idle longer than
// the warm TTL.
func (b *Backend) Tick(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	jobs := b.expireWarmLocked(now)
	for _, fn := range b.sortedFunctionsLocked() {
		rate := fn.rate.Observe(fn.requests.Load(), now)
		if !fn.plan.Autoscaled && !fn.spec.Scale.Zero {
			continue
		}
		in := scheduler.AutoscaleInput{
			Now: now, Rate: rate, LastRequest: time.Unix(0, fn.lastRequest.Load()), Policy: fn.spec.Scale,
			LastScaleUp: fn.lastUp, LastScaleDown: fn.lastDown, Backlog: b.backlogLocked(fn),
		}
		if fn.plan.Autoscaled {
			in.Configs = fn.plan.Configs
		}
		for _, r := range fn.replicas {
			in.Replicas = append(in.Replicas, scheduler.ReplicaCapacity{ID: r.id, Config: r.config})
		}
		d := scheduler.Autoscale(in, b.cfg.Autoscale)
		if d.Empty() {
			continue
		}
		for _, id := range d.Remove {
			for i, r := range fn.replicas {
				if r.id == id {
					b.retireLocked(fn, i, now)
					break
				}
			}
			fn.lastDown = now
		}
		for _, c := range d.Add {
			if !b.promoteLocked(fn, c, true) {
				fn.replicas = append(fn.replicas, &replica{id: newReplicaID(fn.spec.Name()), config: c, pendingSince: now.UTC()})
			}
			fn.lastUp = now
		}
		if len(d.Add) > 0 {
			fn.scaledUp++
		}
		if len(d.Remove) > 0 {
			fn.scaledDown++
		}
		fn.desired = len(fn.replicas)
		fn.lastScale = d.Reason
		b.log.Info("autoscaled", zap.String("function", fn.spec.Name()), zap.String("namespace", fn.spec.Namespace()),
			zap.Int("added", len(d.Add)), zap.Int("removed", len(d.Remove)), zap.Int("replicas", fn.desired), zap.Float64("rate", rate), zap.String("reason", d.Reason))
		b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), "autoscaler", d.Reason, now)
		b.saveLogged(fn)
	}
	b.reconcileLocked(now, nil)
	b.stopLaterLocked(jobs)
}

// expireWarmLocked stops warm replicas idle for longer than the warm TTL.
func (b *Backend) expireWarmLocked(now time.Time) []stopJob {
	expired := map[string]bool{}
	for _, id := range b.cache.Expired(now, b.cfg.WarmTTL) {
		expired[id] = true
	}
	if len(expired) == 0 {
		return nil
	}
	var jobs []stopJob
	for _, fn := range b.functions {
		kept := fn.idle[:0]
		changed := false
		for _, r := range fn.idle {
			if !expired[r.id] {
				kept = append(kept, r)
				continue
			}
			changed = true
			jobs = append(jobs, b.releaseLocked(fn, r, now))
			b.cache.CountEviction(true)
			b.log.Info("warm replica expired", zap.String("function", fn.spec.Name()), zap.String("replica", r.id))
		}
		fn.idle = kept
		if changed {
			b.saveLogged(fn)
		}
	}
	return jobs
}

// backlogLocked is what waits for fn beyond what its replicas serve at
// once, the autoscaler's Backlog: at each replica in service, the requests
// in flight above its batch size (its emulated worker's slots; they wait
// for the running batch), plus those the proxy's dispatcher queues for a
// replica (X-Model requests, see Queued).
func (b *Backend) backlogLocked(fn *function) float64 {
	n := int64(0)
	for _, r := range fn.replicas {
		n += max(r.inFlight.Load()-int64(max(r.config.Batch, 1)), 0)
	}
	b.waitingMu.Lock()
	n += int64(b.waiting[key(fn.spec.Namespace(), fn.spec.Name())])
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
