package scheduler

import "time"

// A function whose bursts recur at a steady period can have its burst's
// capacity started before the burst: a replica that starts when the
// burst is seen serves only after its start-up and model load, and every
// request above the replicas in service misses its SLO until then (the
// family suites' bursts, docs/evaluation.md). RateHistory learns the
// period from the function's own smoothed rate: a burst begins where the
// rate passes burstPeakRatio times its base and ends where it falls back
// under burstEndRatio times it; two intervals between onsets that agree
// (within burstPeriodTolerance) are a period. Irregular rises (on/off
// traces, steps) give intervals that disagree, and no prediction.

const (
	// burstBaseQuantile: a function's base rate is this quantile of its
	// rates within the window. Its bursts, and the smoothed rate's decay
	// after each, fill most of a short period; the troughs between them
	// are the base.
	burstBaseQuantile = 0.1
	// burstEndRatio: a burst is over once the rate is back under this
	// many times the base (hysteresis below burstPeakRatio, so that the
	// noise at an edge does not make two onsets of one burst).
	burstEndRatio = 1.25
	// burstPeriodTolerance: two intervals between onsets are one period
	// when they differ by at most this share of the longer.
	burstPeriodTolerance = 0.2
	// burstMinRise: an onset rises at least this much (req/s) above the
	// base, so that a trickle's noise is no burst.
	burstMinRise = 1.0
	// maxOnsets is how many onsets are kept: the last two intervals
	// decide.
	maxOnsets = 3
	// burstMaxRise: a burst whose smoothed rate took longer than this
	// from its onset to its peak is a swell (a diurnal, a ramp): the
	// autoscaler follows it with time to start replicas (twice the
	// longest cold start of the workload family), so its warm replicas
	// are no burst's capacity (Learning). Held, they cost the cost
	// run's ramp 3 % more GPU-seconds at the same violations.
	burstMaxRise = time.Minute
)

func (h *RateHistory) observeBurst(now time.Time, rate float64) {
	base := h.base()
	switch {
	case h.inBurst && rate < burstEndRatio*base:
		h.inBurst = false
	case h.inBurst:
		if rate > h.peak {
			h.peak, h.peakAt = rate, now
		}
	case base > 0 && rate >= burstPeakRatio*base && rate-base >= burstMinRise:
		h.inBurst, h.peak, h.peakAt, h.planned = true, rate, now, rate
		h.onsets = append(h.onsets, now)
		if len(h.onsets) > maxOnsets {
			h.onsets = h.onsets[len(h.onsets)-maxOnsets:]
		}
	}
}

// ObservePlanned records a rate the autoscaler planned for (the smoothed
// rate or a rise's own): within a burst, the highest is the burst's
// planned peak (PlannedPeak).
func (h *RateHistory) ObservePlanned(rate float64) {
	if h.inBurst {
		h.planned = max(h.planned, rate)
	}
}

// InBurst reports whether the function is in a burst: its rate rose
// past burstPeakRatio times its base and has not yet fallen back under
// burstEndRatio times it.
func (h *RateHistory) InBurst() bool { return h.inBurst }

// PlannedPeak is the highest rate planned for within the last burst
// (ObservePlanned), and the onset it was counted from; false before any
// burst.
func (h *RateHistory) PlannedPeak() (float64, time.Time, bool) {
	if len(h.onsets) == 0 {
		return 0, time.Time{}, false
	}
	return max(h.planned, h.peak), h.onsets[len(h.onsets)-1], true
}

// base is the function's rate between bursts (burstBaseQuantile of the
// window).
func (h *RateHistory) base() float64 {
	if len(h.sorted) == 0 {
		return 0
	}
	return h.sorted[int(burstBaseQuantile*float64(len(h.sorted)-1))]
}

// Period is the function's burst period: the mean of its last two
// intervals between onsets, when they agree; false when fewer than
// three onsets are known or the intervals disagree.
func (h *RateHistory) Period() (time.Duration, bool) {
	n := len(h.onsets)
	if n < 3 {
		return 0, false
	}
	a, b := h.onsets[n-2].Sub(h.onsets[n-3]), h.onsets[n-1].Sub(h.onsets[n-2])
	if float64(max(a, b)-min(a, b)) > burstPeriodTolerance*float64(max(a, b)) {
		return 0, false
	}
	return (a + b) / 2, true
}

// Learning reports whether the function is bursty (Bursty), has had a
// burst that rose to its peak within burstMaxRise and is over, and its
// bursts' timing is not yet known: fewer than three onsets seen. Its warm
// replicas are then the only capacity its next burst can count on.
func (h *RateHistory) Learning() bool {
	n := len(h.onsets)
	return h.Bursty() && !h.inBurst && n > 0 && n < 3 && h.peakAt.Sub(h.onsets[n-1]) <= burstMaxRise
}

// ExpectedBurst is the rate of the function's next burst, when its period
// is known and the burst is due: from lead before the onset the period
// points at (a replica's start-up and the detection's lag) to a quarter
// period after it. The rate is the last burst's peak. An onset seen moves
// the window a period on; a burst that does not come within it is not
// expected again until the next onset is seen. Where lead is longer than
// the rest of the period, the window covers the whole period: bursts
// that come sooner than a replica starts keep their capacity.
func (h *RateHistory) ExpectedBurst(now time.Time, lead time.Duration) (float64, bool) {
	p, ok := h.Period()
	if !ok {
		return 0, false
	}
	next := h.onsets[len(h.onsets)-1].Add(p)
	if now.Before(next.Add(-lead)) || now.After(next.Add(p/4)) {
		return 0, false
	}
	return h.peak, true
}
