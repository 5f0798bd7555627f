package local

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openfaas/faas-provider/logs"
)

const (
	defaultLogsPerFunction = 1000
	// followBuffer is how far a follower may lag behind before it loses
	// messages; Append never waits for it.
	followBuffer = 256
)

// logHub keeps the recent output of every function's replicas in memory and
// serves faas-provider log queries (logs.Requester) from it.
type logHub struct {
	perFunction int
	dropped     atomic.Uint64

	mu    sync.Mutex
	funcs map[fnKey]*fnLog
}

type fnKey struct{ namespace, function string }

// fnLog is a bounded ring of one function's messages and its followers.
type fnLog struct {
	ring      []logs.Message
	next      int // where the next message goes once the ring is full
	followers map[*follower]struct{}
}

type follower struct {
	instance string
	ch       chan logs.Message // closed by Forget
}

func newLogHub(perFunction int) *logHub {
	if perFunction <= 0 {
		perFunction = defaultLogsPerFunction
	}
	return &logHub{perFunction: perFunction, funcs: map[fnKey]*fnLog{}}
}

// Append records one line of a replica's output. It never blocks on
// followers.
func (h *logHub) Append(namespace, function, instance, text string, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	m := logs.Message{Name: function, Namespace: namespace, Instance: instance, Timestamp: at, Text: text}
	h.mu.Lock()
	defer h.mu.Unlock()
	fl := h.fn(fnKey{namespace, function})
	if len(fl.ring) < h.perFunction {
		fl.ring = append(fl.ring, m)
	} else {
		fl.ring[fl.next] = m
		fl.next = (fl.next + 1) % len(fl.ring)
	}
	for f := range fl.followers {
		if f.instance != "" && f.instance != instance {
			continue
		}
		select {
		case f.ch <- m:
		default:
			h.dropped.Add(1)
		}
	}
}

// Forget drops a deleted function's messages and ends its followers'
// streams, as the end of its containers would.
func (h *logHub) Forget(namespace, function string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := fnKey{namespace, function}
	fl, ok := h.funcs[k]
	if !ok {
		return
	}
	for f := range fl.followers {
		close(f.ch)
	}
	delete(h.funcs, k)
}

// Dropped counts the messages that followers lost for being too slow.
func (h *logHub) Dropped() uint64 { return h.dropped.Load() }

// Query implements logs.Requester: the backlog that matches req, then, with
// Follow, new messages until ctx is done or the function is forgotten.
func (h *logHub) Query(ctx context.Context, req logs.Request) (<-chan logs.Message, error) {
	k := fnKey{req.Namespace, req.Name}
	var f *follower

	// Backlog and registration under one lock, so a follower sees every
	// message exactly once.
	h.mu.Lock()
	backlog := h.backlog(k, req)
	if req.Follow {
		f = &follower{instance: req.Instance, ch: make(chan logs.Message, followBuffer)}
		h.fn(k).followers[f] = struct{}{}
	}
	h.mu.Unlock()

	out := make(chan logs.Message, 16)
	go func() {
		defer close(out)
		if f != nil {
			defer h.unfollow(k, f)
		}
		for _, m := range backlog {
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
		if f == nil {
			return
		}
		for {
			select {
			case m, ok := <-f.ch:
				if !ok {
					return
				}
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// backlog is the stored messages that match req, oldest first. Caller holds mu.
func (h *logHub) backlog(k fnKey, req logs.Request) []logs.Message {
	fl, ok := h.funcs[k]
	if !ok {
		return nil
	}
	n := len(fl.ring)
	var msgs []logs.Message
	for i := range n {
		m := fl.ring[(fl.next+i)%n]
		if req.Instance != "" && m.Instance != req.Instance {
			continue
		}
		if req.Since != nil && m.Timestamp.Before(*req.Since) {
			continue
		}
		msgs = append(msgs, m)
	}
	if req.Tail > 0 && len(msgs) > req.Tail {
		msgs = msgs[len(msgs)-req.Tail:]
	}
	return msgs
}

// fn returns k's log, creating it: a follower may wait for a function that
// has not written anything yet. Caller holds mu.
func (h *logHub) fn(k fnKey) *fnLog {
	fl, ok := h.funcs[k]
	if !ok {
		fl = &fnLog{followers: map[*follower]struct{}{}}
		h.funcs[k] = fl
	}
	return fl
}

func (h *logHub) unfollow(k fnKey, f *follower) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fl, ok := h.funcs[k]
	if !ok {
		return // forgotten, which closed f.ch
	}
	if _, ok := fl.followers[f]; !ok {
		return
	}
	delete(fl.followers, f)
	// A follow query for a function that never logged must not leave an
	// entry behind.
	if len(fl.ring) == 0 && len(fl.followers) == 0 {
		delete(h.funcs, k)
	}
}
