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
// that is still on time (oldest first among each; not in an X-Model
// queue, which keeps the locality rules' order), so that a queue which
// outgrew its replicas in a burst costs the requests already lost, not
// every request behind them too. In first-come order such a queue made
// each newer request wait out the older ones and miss in turn, until the
// scale-up caught up: family6 p18 missed 7.4 % (family3 k08 5.1 %), with
// late ones last 2.6 % (1.8 %), on the same GPU-seconds. A late request is
// still served, never dropped (the proxy's timeouts still apply), and
// once late it stays late.
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
