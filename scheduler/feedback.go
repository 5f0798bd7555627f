package scheduler

import (
	"math"
	"time"
)

// SLOFeedback corrects the queueing model with what the proxy measured of
// a function: where its replicas, settled and sized by the model, still
// miss the SLO beyond its quantile, the model rated them above what they
// serve (interference from busy neighbours of other functions, host CPU
// the profile did not see), and the autoscaler plans for Factor times the
// rate. Measured in the simulator: on family7's q10, shufflenet_v2 at 370
// req/s and a 21-ms SLO, three replicas rated 390 req/s missed 5.5 % of
// its requests, every on period, and the autoscaler never added one
// (docs/scheduling.md §4, "Feedback from the SLO").
//
// The zero value is a factor of 1. It is a value: Observe returns the
// next one, so the decision stays a pure function of the counts.
type SLOFeedback struct {
	// Factor is what the autoscaler multiplies the rate by, in [1,
	// feedbackMaxFactor].
	Factor float64
	// served and missed are the running counts at the last Observe; sum
	// and miss the requests and misses of the current window, each
	// decayed by feedbackHalfLife.
	served, missed uint64
	sum, miss      float64
	window         time.Duration // settled time the window covers
	at             time.Time     // the last Observe
	started        bool
}

const (
	// feedbackStep is how much one significant excess raises the factor.
	// The window then starts afresh, and only once the replicas it adds
	// are ready and settled does a second one count.
	feedbackStep = 1.15
	// feedbackWindow is the least settled time a window covers before it
	// may raise the factor: at a high rate one second's misses are
	// significant already, and the misses of the requests in flight at a
	// raise complete after it.
	feedbackWindow = 5 * time.Second
	// feedbackMaxFactor bounds the correction: past it the model is not
	// off by a margin, and more replicas would not be the cure.
	feedbackMaxFactor = 2.0
	// feedbackHalfLife is how long a window's old counts weigh half.
	feedbackHalfLife = 20 * time.Second
	// feedbackRelax is the factor's half-life back to 1 while the misses
	// stay within a quarter of the budget.
	feedbackRelax = 5 * time.Minute
	// feedbackAlarm: the misses must be this unlikely under the budget
	// (a Poisson count at the budget's share) to raise the factor.
	feedbackAlarm = 1e-6
)

// Value is the factor to plan with: 1 for the zero value.
func (f SLOFeedback) Value() float64 {
	if f.Factor < 1 {
		return 1
	}
	return f.Factor
}

// PlanSLO is the SLO to plan slo's replicas at: slo over the square root
// of the factor, in steps of feedbackSLOStep. Planned at Value() times
// the rate and at this SLO, a replica is valued as if its batches ran
// √Factor slower and its rate were √Factor higher (a queue's capacity
// with every time k times longer is its capacity at SLO/k, over k): the
// correction is shared between the rate and the service time, for misses
// may come from either. The rate alone cannot correct a replica whose
// misses do not grow with its rate: googlenet runs a batch in 23 ms at
// any slice and batch, so one that waits out a running batch and then
// runs its own takes 46 ms against a 48-ms SLO. Slowed a few percent by
// busy neighbours it misses, and the model, which rated the lone replica
// far above twice its rate, never added one (family6's p12: 6.5 % of its
// requests at a factor of 2; docs/scheduling.md §4).
func (f SLOFeedback) PlanSLO(slo time.Duration) time.Duration {
	k := math.Round(math.Sqrt(f.Value())/feedbackSLOStep) * feedbackSLOStep
	if k <= 1 {
		return slo
	}
	return time.Duration(float64(slo) / k)
}

// feedbackSLOStep is how finely PlanSLO follows the factor: the menu's
// lone-replica rates are solved afresh at each planned SLO, and the
// factor relaxes a little at every tick.
const feedbackSLOStep = 0.02

// SettledBacklog is the most requests that may wait for a function whose
// replicas serve throughput req/s (their profiled rates, summed) while its
// misses still count against the model: what those replicas clear within
// one SLO. A queue the model itself expects, a request or two behind each
// batch of a busy pool, is part of the service the model rates, and
// misses beside it are the model's; a cold start's queue or a burst's is
// larger than one SLO's work, and its misses are not. Counting only an
// empty queue as settled left the feedback blind where it is needed
// most: a pool at batch 1 near its rated capacity has a request waiting
// at a third of its ticks, so it was almost never settled for 5 s, and
// zoo2's zb19 (4 heavy models on one whole GPU, 45 req/s against a rated
// 50) missed 3.65 % of its requests with the factor at 1
// (docs/evaluation.md, "Feedback beside a queue the model expects").
func SettledBacklog(throughput float64, slo time.Duration) float64 {
	return max(throughput, 0) * slo.Seconds()
}

// Observe is f after the counts served and missed (running counts of the
// function's requests with an SLO that completed, and of those that took
// longer than it or failed) at now. settled says the
// function's replicas were all ready, with no more waiting than
// SettledBacklog, for long enough
// that what completed was served by them: while it is false the window
// only restarts (misses of a cold start or a burst's queue are not the
// model's error). budget is the share of requests the SLO's quantile
// allows over it (1 - quantile).
func (f SLOFeedback) Observe(now time.Time, served, missed uint64, settled bool, budget float64) SLOFeedback {
	if !f.started || served < f.served || missed < f.missed {
		// First counts, or a counter that went back (a restart): a new base.
		f.started, f.served, f.missed, f.sum, f.miss, f.at = true, served, missed, 0, 0, now
		return f
	}
	dt := now.Sub(f.at)
	f.at = now
	dS, dM := float64(served-f.served), float64(missed-f.missed)
	f.served, f.missed = served, missed
	if !settled || dt <= 0 || !(budget > 0) {
		f.sum, f.miss, f.window = 0, 0, 0
		return f
	}
	decay := math.Exp2(-dt.Seconds() / feedbackHalfLife.Seconds())
	f.sum, f.miss, f.window = f.sum*decay+dS, f.miss*decay+dM, f.window+dt
	switch {
	case f.window >= feedbackWindow && f.miss > budget*f.sum && poissonTail(budget*f.sum, f.miss) < feedbackAlarm:
		f.Factor = min(f.Value()*feedbackStep, feedbackMaxFactor)
		f.sum, f.miss, f.window = 0, 0, 0
	case f.Value() > 1 && f.sum >= 4/budget && f.miss <= budget*f.sum/4:
		relax := math.Exp2(-dt.Seconds() / feedbackRelax.Seconds())
		f.Factor = 1 + (f.Value()-1)*relax
	}
	return f
}
