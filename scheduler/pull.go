package scheduler

// Slot is a replica as the pull dispatcher sees it: how much it runs now
// and how fast its slice is.
type Slot struct {
	// InFlight is how many requests the replica runs or has been handed.
	InFlight int
	// Batch is its slice's batch size b: it can start a request while it
	// has fewer than b in flight. 0: the slice is unknown (a function
	// without a profile), and the replica is never held back.
	Batch int
	// Throughput is its slice's rate at full batches (req/s,
	// SliceConfig.Throughput); 0: unknown.
	Throughput float64
	// Models is how many models it holds: a load goes to the replica
	// holding fewest, so models spread instead of evicting each other.
	Models int
}

// known reports whether the slot's slice is known, so that it is held to
// its batch size and ranked by speed.
func (s Slot) known() bool { return s.Batch > 0 && s.Throughput > 0 }

// canStart reports whether the replica starts one more request now.
func (s Slot) canStart() bool { return !s.known() || s.InFlight < s.Batch }

// batchLatency is a full batch's latency at the slot's slice, in seconds;
// the slice must be known.
func (s Slot) batchLatency() float64 { return float64(s.Batch) / s.Throughput }

// completion is when, in seconds from now, one more request would be done
// there. On a replica not running a batch it starts now, with what this
// pass handed it: its count plus this one at its slice's rate, so that a
// replica half as fast scores twice as late for the same count and is
// handed work in proportion to its speed. On one running a batch it
// waits for that batch to end, half a full batch's latency on average,
// then runs in the next: a full batch's latency at the most. Ranked by
// count alone, a batch-2 slice running one request scored sooner than an
// idle batch-1 slice of half its rate, so a request waited out a whole
// batch beside an idle replica (family f01: regnet_y_800mf at SLO x2,
// 5 % and 10 % slices of a 25-ms batch, 5 % of its requests over).
func (s Slot) completion(running bool) float64 {
	if running {
		return 1.5 * s.batchLatency()
	}
	return float64(s.InFlight+1) / s.Throughput
}

// sooner orders two slots by expected completion: a known slice before an
// unknown one (which is ranked by its count alone), then the earlier
// completion, then fewer in flight, then the lower index, so the choice
// is deterministic. running[i] is whether slot i ran a batch before this
// pass.
func sooner(a Slot, i int, b Slot, j int, running []bool) bool {
	if a.known() != b.known() {
		return a.known()
	}
	if a.known() {
		if ca, cb := a.completion(running[i]), b.completion(running[j]); ca != cb {
			return ca < cb
		}
	}
	if a.InFlight != b.InFlight {
		return a.InFlight < b.InFlight
	}
	return i < j
}

// PullView is what Pull knows besides the queue and the slots.
type PullView struct {
	// Holds reports whether slot i has model in memory; nil: no model
	// matters (the locality rules are off).
	Holds func(slot int, model string) bool
	// Bound is how many requests for one model wait for a busy replica
	// holding it before the next one loads the model elsewhere (LALB's
	// bound, -locality-bound). For a slot whose slice is unknown it is
	// also the count at which a holder stops being preferred.
	Bound int
	// OutOfOrder lets a request whose model a replica that can start
	// holds run ahead of older ones that wait (LALB+O3).
	OutOfOrder bool
	// LoadSeconds is how long loading model takes (its profile's load
	// time); nil, or 0 for a model, leaves the wait to Bound. Where known,
	// a request waits for its model's busy holders while the requests
	// ahead of it and it would be through them sooner than a load
	// elsewhere, and within half of SLO (without one, below Bound).
	LoadSeconds func(model string) float64
	// SLO is the function's SLO in seconds (0: none), for LoadSeconds.
	SLO float64
}

// Grant hands queued request Request (an index into the queue) to slot
// Slot.
type Grant struct{ Request, Slot int }

// Pull is the one dispatch decision of the proxy and the simulator: which
// of a function's waiting requests (oldest first) each replica takes now.
// A replica takes a request only when it can start it (fewer in flight
// than its batch size); among those that can, the one that would complete
// it soonest. A request with a model (X-Model), when view.Holds is set,
// keeps the locality rules: a replica holding the model takes it; if only
// replicas that cannot start now hold it and fewer than Bound requests for
// it wait ahead, it waits for them; otherwise the replica holding fewest
// models loads it. In order, nothing overtakes a waiting request; out of
// order, requests whose model a replica holds go first, then loads.
//
// The queue is in the order it is served in: the proxy and the simulator
// put a function's late requests (LateAfter) after its on-time ones
// (LateLast), X-Model queues included. Out of order, a late request whose
// model a replica that can start holds still goes before an on-time one
// that needs a load: a load takes the replica for a second or more, and
// offering the late requests only what the on-time ones left cost the
// zoo suites 3.7 % more GPU-seconds and more misses (docs/evaluation.md,
// "Late requests last in X-Model queues").
//
// Pull counts each grant in slots[i].InFlight, so the caller's slots are
// left as they will be; grants is appended to and returned (no allocation
// when it has room).
func Pull(queue []Waiting, slots []Slot, view PullView, grants []Grant) []Grant {
	if len(queue) == 0 || len(slots) == 0 {
		return grants
	}
	// A slot with requests in flight as the pass begins runs a batch:
	// what the pass hands it waits for the next one (Slot.completion).
	var onStack [64]bool // no allocation for a function of up to 64 replicas
	running := onStack[:0]
	for _, sl := range slots {
		running = append(running, sl.InFlight > 0)
	}
	locality := view.Holds != nil
	if !locality {
		// Every request is alike: the oldest go first, each to the
		// replica that completes it soonest, until none can start one.
		for r := range queue {
			s := best(slots, running, func(int) bool { return true })
			if s < 0 {
				break
			}
			slots[s].InFlight++
			grants = append(grants, Grant{Request: r, Slot: s})
		}
		return grants
	}
	taken := make([]bool, len(queue)) // small: the waiting requests
	hit := func(r int) int {
		m := queue[r].Model
		return best(slots, running, func(i int) bool {
			return m == "" || view.Holds(i, m) && (slots[i].known() || slots[i].InFlight < view.Bound)
		})
	}
	grant := func(r, s int) {
		slots[s].InFlight++
		taken[r] = true
		grants = append(grants, Grant{Request: r, Slot: s})
	}
	if view.OutOfOrder {
		// Hits first, oldest first: a request whose model a replica
		// that can start holds never waits behind a load.
		for r := range queue {
			if s := hit(r); s >= 0 {
				grant(r, s)
			}
		}
	}
	ahead := map[string]int{} // requests still waiting per model, ahead of r
	for r := range queue {
		if taken[r] {
			continue
		}
		if !anyCanStart(slots) {
			break
		}
		m := queue[r].Model
		s := hit(r)
		if s < 0 && !(m != "" && holderBusy(slots, view, m) && waitsForHolder(slots, view, m, ahead[m])) {
			s = load(slots, running)
		}
		if s >= 0 {
			grant(r, s)
			continue
		}
		if !view.OutOfOrder {
			break
		}
		ahead[m]++
	}
	return grants
}

// best is the slot that can start a request and completes it soonest
// among those ok admits, or -1.
func best(slots []Slot, running []bool, ok func(int) bool) int {
	b := -1
	for i, s := range slots {
		if s.canStart() && ok(i) && (b < 0 || sooner(s, i, slots[b], b, running)) {
			b = i
		}
	}
	return b
}

// load is the slot a model load goes to: one that can start a request,
// holding fewest models, then completing soonest; -1 for none.
func load(slots []Slot, running []bool) int {
	b := -1
	for i, s := range slots {
		if !s.canStart() {
			continue
		}
		if b < 0 || s.Models < slots[b].Models || s.Models == slots[b].Models && sooner(s, i, slots[b], b, running) {
			b = i
		}
	}
	return b
}

// holderBusy reports whether a replica holding model cannot start it now,
// so that a request for it may wait for that replica rather than load it.
// A replica of unknown slice can always start one: it is never waited for.
func holderBusy(slots []Slot, view PullView, model string) bool {
	for i, s := range slots {
		if view.Holds(i, model) && !s.canStart() {
			return true
		}
	}
	return false
}

// waitsForHolder says whether a request for model, with ahead requests
// for it waiting before it, waits for the model's busy holders rather
// than load it elsewhere (PullView.LoadSeconds): while they would serve it
// sooner than the load, within half the SLO. The holders' wait is read at
// their whole throughput, though they serve other models too: hence the
// SLO's half as a cap. Without an SLO, Bound caps it (a holder whose
// slice is unknown leaves it to Bound alone).
func waitsForHolder(slots []Slot, view PullView, model string, ahead int) bool {
	load := 0.0
	if view.LoadSeconds != nil {
		load = view.LoadSeconds(model)
	}
	if load <= 0 {
		return ahead < view.Bound
	}
	rate := 0.0
	for i, s := range slots {
		if !view.Holds(i, model) {
			continue
		}
		if !s.known() {
			return ahead < view.Bound
		}
		rate += s.Throughput
	}
	if rate <= 0 {
		return ahead < view.Bound
	}
	wait := float64(ahead+1) / rate
	if view.SLO > 0 {
		return wait < load && wait < view.SLO/2
	}
	// No SLO to bound the wait: the locality bound does, so that the
	// popular models are copied as LALB copies them (a load serves the
	// requests after it too, which the wait against one load leaves out).
	return wait < load && ahead < view.Bound
}

func anyCanStart(slots []Slot) bool {
	for _, s := range slots {
		if s.canStart() {
			return true
		}
	}
	return false
}
