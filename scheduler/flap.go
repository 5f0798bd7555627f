package scheduler

import "time"

// FlapGuard holds a multi-model function's replica count after a
// harmful flap (the core judges only those; see lifecycle applyScale): a
// scale-down undone by a scale-up within flapWindow, with misses or a
// queue in between. Such a down was judged on a capacity the pool left
// did not have, and the next one, judged the same way on the same
// rhythm, would flap again. The causes are ones the rate alone does not
// show: an on/off load whose off periods pull the smoothed rate below
// what each on period needs (zoo6's zf15: three replicas to two in every
// off period, back to three a few seconds into the next on period, a few
// dozen misses each), and a multi-model pool whose removed replica's
// models are then loaded by the others (zoo5's ze06). While held, the
// autoscaler leaves no fewer replicas than the down started from, and no
// replica is resized. Each harmful flap within flapHoldMax of the last
// hold's end doubles the hold, up to flapHoldMax.
//
// A flap that cost nothing does not hold: a warm replica brought back
// before any request missed is the cheap way to follow a load that falls
// and rises (holding through every such flap cost 1.7 % more GPU-seconds
// on the single-model family suites, where the held replicas mostly
// idled). Nor does a single-model function's: its warm replica comes
// back with its model, and even harmful flaps held cost 0.3-0.5 % more
// GPU-seconds there for no fewer runs above 1 %.
//
// The zero value holds nothing. It is a value: each method returns the
// next one, so the decision stays a pure function of the times and the
// counts.
type FlapGuard struct {
	until time.Time
	hold  time.Duration
	floor int
	// The last scale-down: when, from how many replicas, and the
	// function's running SLO counts then.
	downAt                 time.Time
	downFrom               int
	downServed, downMissed uint64
}

const (
	// flapWindow is how soon after a scale-down a scale-up undoes it:
	// two cool-downs. Past it the load has moved, and the down was right
	// when it was made.
	flapWindow = time.Minute
	// flapHoldMin and flapHoldMax bound a hold: from a few on/off cycles
	// to a warm replica's default lifetime.
	flapHoldMin = 2 * time.Minute
	flapHoldMax = 10 * time.Minute
)

// ScaledDown is g after a scale-down at now from replicas, with the
// function's running counts of requests with an SLO that completed
// (served) and of those that missed it (missed).
func (g FlapGuard) ScaledDown(now time.Time, replicas int, served, missed uint64) FlapGuard {
	g.downAt, g.downFrom, g.downServed, g.downMissed = now, replicas, served, missed
	return g
}

// ScaledUp is g after a scale-up at now, with the running counts as in
// ScaledDown, the requests waiting (backlog) and the most that may wait
// while the pool serves as the model expects (settled, SettledBacklog).
// The flap is harmful where more than budget (MissBudget) of the
// requests completed since the down missed their SLO, or where more
// wait than settled. It returns g unchanged unless a hold starts.
func (g FlapGuard) ScaledUp(now time.Time, served, missed uint64, backlog, settled, budget float64) FlapGuard {
	if g.downAt.IsZero() || now.Sub(g.downAt) > flapWindow || g.downFrom <= 0 {
		return g
	}
	if served < g.downServed || missed < g.downMissed {
		return g // counters that went back (a restart): nothing to judge
	}
	dS, dM := float64(served-g.downServed), float64(missed-g.downMissed)
	if dM <= budget*dS && backlog <= settled {
		return g
	}
	hold := flapHoldMin
	if !g.until.IsZero() && now.Sub(g.until) < flapHoldMax {
		hold = min(2*g.hold, flapHoldMax)
	}
	g.floor = max(g.downFrom, g.Floor(now))
	g.until, g.hold = now.Add(hold), hold
	g.downAt = time.Time{} // one down, one flap
	return g
}

// Floor is the fewest replicas a scale-down may leave at now: 0 when
// nothing is held.
func (g FlapGuard) Floor(now time.Time) int {
	_, floor := g.Held(now)
	return floor
}

// Held is how long the current hold has left at now, and its floor.
func (g FlapGuard) Held(now time.Time) (time.Duration, int) {
	if !now.Before(g.until) {
		return 0, 0
	}
	return g.until.Sub(now), g.floor
}
