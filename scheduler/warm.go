package scheduler

import (
	"slices"
	"time"
)

// WarmInput is what decides how long one warm replica keeps its memory.
type WarmInput struct {
	// WarmFor is how long the replica has been warm.
	WarmFor time.Duration
	// IdleFor is how long its function has had no request.
	IdleFor time.Duration
	// Gaps are the function's observed idle gaps: the time between a
	// request and the next, where it was at least MinIdleGap.
	Gaps []time.Duration
	// FreeMemory is the share of its GPU's memory free (0 to 1).
	FreeMemory float64
	// Max is the upper bound (the provider's -warm-ttl).
	Max time.Duration
}

const (
	// MinIdleGap is the shortest gap between requests that counts as
	// idle: one autoscaler tick, what the lifecycle can see.
	MinIdleGap = time.Second
	// MinWarmGaps is how many idle gaps the gap rule needs before it
	// trusts them.
	MinWarmGaps = 3
	// MinWarmLifetime: a warm replica lives at least the autoscaler's
	// cool-down, so a scale-down the next tick undoes is a cache hit.
	MinWarmLifetime = 30 * time.Second
	// warmGapQuantile and warmGapMargin: a function idle for twice the
	// 90th percentile of its past idle gaps is, by its own history, in an
	// unusually long one; the chance that its next request comes within a
	// warm replica's lifetime is then low.
	warmGapQuantile = 0.9
	warmGapMargin   = 2
	// warmFreeMemory: at least this share of the GPU's memory free keeps
	// the full lifetime; below it the lifetime shrinks in proportion, so
	// a warm replica on a crowded GPU goes before it blocks a placement
	// or a move.
	warmFreeMemory = 0.5
)

// WarmLifetime is how long, since its function's last request, a warm
// replica of a function with these idle gaps keeps its memory on a GPU
// with this share of memory free: twice the 90th percentile of the gaps
// (Max while fewer than MinWarmGaps are known), scaled down below 50 %
// free memory, within [MinWarmLifetime, Max].
func WarmLifetime(gaps []time.Duration, freeMemory float64, maxTTL time.Duration) time.Duration {
	if maxTTL <= 0 {
		return 0
	}
	l := maxTTL
	if len(gaps) >= MinWarmGaps {
		l = min(l, warmGapMargin*quantile(gaps, warmGapQuantile))
	}
	l = time.Duration(float64(l) * pressure(freeMemory))
	return min(max(l, MinWarmLifetime), maxTTL)
}

// WarmExpired reports whether a warm replica should stop: warm for Max
// (scaled down by memory pressure, as WarmLifetime), or its function idle
// for longer than WarmLifetime says — and warm at least
// MinWarmLifetime either way.
func WarmExpired(in WarmInput) bool {
	if in.WarmFor < min(MinWarmLifetime, in.Max) {
		return false
	}
	upper := min(max(time.Duration(float64(in.Max)*pressure(in.FreeMemory)), MinWarmLifetime), in.Max)
	if in.WarmFor >= upper {
		return true
	}
	return in.IdleFor >= WarmLifetime(in.Gaps, in.FreeMemory, in.Max)
}

// idleGapArrivals: a function idle for as long as this many of its
// requests take to arrive at its smoothed rate has stopped, not thinned
// out — Poisson arrivals at that rate leave such a gap with a chance of
// e^-10.
const idleGapArrivals = 10

// InIdleGap reports whether a function whose last request came at
// lastRequest is in an idle gap it will come back from: idle for at least
// MinIdleGap and for idleGapArrivals of its requests at rate, yet not as
// long as a warm replica of it lives (WarmLifetime with its gaps, no
// memory pressure). Its smoothed rate decays through such a gap (an
// on/off trace's off period) while the load that comes back is the one
// before it, so its replicas keep their size and its warm replicas their
// memory. Past the lifetime it is gone, not pausing.
func InIdleGap(now, lastRequest time.Time, rate float64, gaps []time.Duration, warmTTL time.Duration) bool {
	if lastRequest.IsZero() {
		return false
	}
	idle := now.Sub(lastRequest)
	return IsIdleGap(idle, rate) && idle < WarmLifetime(gaps, 1, warmTTL)
}

// IsIdleGap reports whether a pause of d between requests of a function
// with this smoothed rate is an idle gap, not the spacing of its
// requests: at least MinIdleGap and the time idleGapArrivals of them take
// to arrive.
func IsIdleGap(d time.Duration, rate float64) bool {
	return d >= MinIdleGap && (rate <= 0 || d.Seconds() >= idleGapArrivals/rate)
}

func pressure(free float64) float64 {
	return min(max(free/warmFreeMemory, 0), 1)
}

// quantile is the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// RateHistory is a function's recent smoothed request rates, one a tick,
// over a window (the warm TTL: a burst older than the longest a warm
// replica lives says nothing about keeping one). It tells a bursty
// function from a steady one for its warm replicas (Bursty), and learns
// when its bursts come (burst.go).
type RateHistory struct {
	// Window is how far back rates are kept.
	Window time.Duration
	at     []time.Time
	rates  []float64
	// The bursts seen (burst.go): their onsets, newest last, whether one
	// is on now, and the highest rate of the last one and when it was.
	onsets  []time.Time
	inBurst bool
	peak    float64
	peakAt  time.Time
	// planned is the highest rate the autoscaler planned for since the
	// last onset (ObservePlanned): a rise's own rate runs ahead of the
	// smoothed one, which a short burst holds well under its height.
	planned float64
	// sorted is rates in order, kept as they come and go: the base
	// (burst.go) is a quantile of them every tick, and sorting the
	// window each time was most of a simulation's time under -race.
	sorted []float64
}

// Observe records rate at now and forgets what is older than Window.
func (h *RateHistory) Observe(now time.Time, rate float64) {
	h.at, h.rates = append(h.at, now), append(h.rates, rate)
	h.sorted = insertSorted(h.sorted, rate)
	i := 0
	for i < len(h.at)-1 && now.Sub(h.at[i]) > h.Window {
		h.sorted = deleteSorted(h.sorted, h.rates[i])
		i++
	}
	h.at, h.rates = h.at[i:], h.rates[i:]
	h.observeBurst(now, rate)
}

func insertSorted(s []float64, v float64) []float64 {
	i, _ := slices.BinarySearch(s, v)
	return slices.Insert(s, i, v)
}

func deleteSorted(s []float64, v float64) []float64 {
	if i, ok := slices.BinarySearch(s, v); ok {
		return slices.Delete(s, i, i+1)
	}
	return s
}

// burstPeakRatio: a function whose rate within the window peaked at
// least this many times above its rate now has just come off a busy
// spell, and by the same pattern is likely to have another. A smoothed
// steady rate (a 10 s half-life) wanders a few % under Poisson noise, far
// below it; a trimmed warm replica of a steady function exists because
// its capacity came down a step, not because its load fell.
const burstPeakRatio = 1.5

// Bursty reports whether the function's rate now is well below its peak
// within the window (burstPeakRatio): its warm replicas are the capacity
// of its next busy spell. A steady function, or one rising, is not.
func (h *RateHistory) Bursty() bool {
	if len(h.rates) < 2 {
		return false
	}
	peak, now := slices.Max(h.rates), h.rates[len(h.rates)-1]
	return peak > 0 && peak >= burstPeakRatio*now
}
