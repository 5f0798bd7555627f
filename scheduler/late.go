package scheduler

import "time"

// LateAfter is how long a request may wait in its function's queue and
// still meet slo: slo less a full batch's latency on the fastest of slots,
// the soonest a request started now is sure to be done. ok is false when
// no request is told apart as late: no SLO, no slot whose slice is known,
// or a full batch that takes the whole SLO (every request would be late,
// and first come, first served is the order that is left).
//
// A request that has waited longer is late: it misses its SLO wherever it
// runs. The proxy and the simulator then serve it after every request
// that is still on time (oldest first among each, LateLast), so that a
// queue which outgrew its replicas in a burst costs the requests already
// lost, not every request behind them too. In first-come order such a
// queue made each newer request wait out the older ones and miss in turn,
// until the scale-up caught up: family6 p18 missed 7.4 % (family3 k08
// 5.1 %), with late ones last 2.6 % (1.8 %), on the same GPU-seconds. A
// late request is still served, never dropped (the proxy's timeouts still
// apply), and once late it stays late.
func LateAfter(slo time.Duration, slots []Slot) (after time.Duration, ok bool) {
	if slo <= 0 {
		return 0, false
	}
	var fastest time.Duration
	for _, s := range slots {
		if !s.known() {
			continue
		}
		if d := time.Duration(s.batchLatency() * float64(time.Second)); !ok || d < fastest {
			fastest, ok = d, true
		}
	}
	if !ok || fastest >= slo {
		return 0, false
	}
	return slo - fastest, true
}

// LateLast is the order a function's queue is offered to Pull in: its
// on-time requests first, then its late ones, each oldest first. queue is
// oldest first and its first late requests are the late ones (a request
// is late by its age, LateAfter, so they lead it). It returns that order
// in ordered and, for each of its places, the request's index in queue
// (a Grant's Request maps back through it), at most limit places (a
// simulated overload's queue of a million requests is offered by its
// head); both are appended to from empty, so a caller reuses their
// arrays.
//
// An X-Model queue is ordered so too, and Pull's locality rules then work
// on that order: out of order, a request whose model a free replica holds
// goes first, late or not (a load would take the replica for a second or
// more), and the rest go on-time first. Kept in arrival order there, a
// multi-model function's first burst cost every request behind its
// overflow as well: zoo5's ze13 missed all of its requests for 5 s at the
// burst's onset, where its replicas in service served its base rate
// (docs/evaluation.md, "Late requests last in X-Model queues").
func LateLast(queue []Waiting, late, limit int, ordered []Waiting, order []int) ([]Waiting, []int) {
	late = min(max(late, 0), len(queue))
	ordered, order = ordered[:0], order[:0]
	for i := late; i < len(queue) && len(order) < limit; i++ {
		ordered, order = append(ordered, queue[i]), append(order, i)
	}
	for i := 0; i < late && len(order) < limit; i++ {
		ordered, order = append(ordered, queue[i]), append(order, i)
	}
	return ordered, order
}
