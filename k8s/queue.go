package k8s

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/util/workqueue"
)

// Every write to the cluster goes through one rate-limited workqueue,
// keyed by function (namespace/name) as sample-controller does, and one
// worker: the control loop, the autoscaler and the API's requests only
// change the leader's state and enqueue the keys that changed. A key
// queued again while it is being written is written once more after, with
// the state as it is then; a failed write is retried with the queue's
// backoff. A request waits for the first write of its key that starts
// after its change (write), so it answers once its record is written, or
// with that write's error.

// reservationsKey is the queue's key for the GPU placeholders; function
// keys always hold a '/'.
const reservationsKey = "reservations"

// writer is one leadership term's queue and the requests waiting on it.
type writer struct {
	q workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	waiters map[string][]chan error
	stopped error // set once the term ended: the error waiters get
}

func newWriter() *writer {
	return &writer{
		q: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "faas-gpu-writes"}),
		waiters: map[string][]chan error{},
	}
}

// add queues key k for writing; it never blocks.
func (w *writer) add(k string) { w.q.Add(k) }

// write queues k and waits for a write of k that starts after this call,
// and returns its error.
func (w *writer) write(ctx context.Context, k string) error {
	ch := make(chan error, 1)
	w.mu.Lock()
	if w.stopped != nil {
		w.mu.Unlock()
		return w.stopped
	}
	w.waiters[k] = append(w.waiters[k], ch)
	w.mu.Unlock()
	w.q.Add(k)
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		w.mu.Lock()
		ws := w.waiters[k]
		for i, c := range ws {
			if c == ch {
				w.waiters[k] = append(ws[:i:i], ws[i+1:]...)
				break
			}
		}
		if len(w.waiters[k]) == 0 {
			delete(w.waiters, k)
		}
		w.mu.Unlock()
		return fmt.Errorf("waiting for function %s to be written: %w", k, ctx.Err())
	}
}

// take removes and returns the requests waiting on k: a write about to
// start answers them.
func (w *writer) take(k string) []chan error {
	w.mu.Lock()
	defer w.mu.Unlock()
	ws := w.waiters[k]
	delete(w.waiters, k)
	return ws
}

// stop ends the term: waiting requests get err, and the worker returns
// once it has finished the write in hand.
func (w *writer) stop(err error) {
	w.mu.Lock()
	if w.stopped == nil {
		w.stopped = err
	}
	all := w.waiters
	w.waiters = map[string][]chan error{}
	w.mu.Unlock()
	for _, ws := range all {
		for _, ch := range ws {
			ch <- err
		}
	}
	w.q.ShutDown()
}

// runWriter is the one writer of a leadership term: it writes the keys
// queued until the queue shuts down.
func (b *Backend) runWriter(ctx context.Context, w *writer) {
	for {
		k, quit := w.q.Get()
		if quit {
			return
		}
		b.writeKey(ctx, w, k)
	}
}

func (b *Backend) writeKey(ctx context.Context, w *writer, k string) {
	defer w.q.Done(k)
	waiting := w.take(k)
	var err error
	if k == reservationsKey {
		err = b.syncReservations(ctx, time.Now())
	} else {
		err = b.syncFunction(ctx, k)
	}
	for _, ch := range waiting {
		ch <- err
	}
	switch {
	case err == nil:
		w.q.Forget(k)
	case errors.Is(err, ErrStandby) || ctx.Err() != nil:
		// No longer leading: the next leader writes from its own state.
		w.q.Forget(k)
	default:
		b.log.Warn("writing to the cluster failed; retrying with backoff", zap.String("key", k),
			zap.Int("retries", w.q.NumRequeues(k)), zap.Error(err))
		w.q.AddRateLimited(k)
	}
}

// enqueueLocked queues keys for the current term's writer; on a standby
// there is none (the leader writes). Called with b.mu held.
func (b *Backend) enqueueLocked(keys ...string) {
	if b.w == nil {
		return
	}
	for _, k := range keys {
		b.w.add(k)
	}
}
