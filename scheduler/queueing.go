package scheduler

import (
	"math"
	"time"
)

// DefaultSLOQuantile is the share of requests that must meet the SLO: a
// latency SLO is read as a p99 target (docs/scheduling.md).
const DefaultSLOQuantile = 0.99

// batchLatency is the time a replica of c computes one full batch.
func (c SliceConfig) batchLatency() float64 {
	if c.Throughput <= 0 || c.Batch <= 0 {
		return math.Inf(1)
	}
	return float64(c.Batch) / c.Throughput
}

// QueueCapacity is the Poisson request rate (req/s) one replica of c
// serves with at most 1-quantile of its requests slower than slo: the
// capacity the autoscaler plans with, below c.Throughput (full batches,
// no waiting). docs/scheduling.md derives it:
//
// A replica computes one batch of up to b requests in L (the full batch's
// latency, an upper bound of a partial one's) and takes the next batch of
// whatever waits when it finishes. A request's response is the rest of
// the running batch, the full batches ahead of it, and its own (L). Count
// the work as an M/D/1 queue whose server does one request's share of a
// batch, s = L/b, at a time: its wait W holds the batches ahead and s of
// the running one, so R ≤ W + (L - s) + L, exactly M/D/1's W + L at
// b = 1. Lundberg's inequality bounds that wait's tail, P(W > t) ≤
// exp(-θt), where θ solves λ(exp(θs) - 1) = θ. Asking P(W > slo - (2L -
// s)) ≤ ε gives θ* = ln(1/ε) / (slo - 2L + s) and the largest rate λ =
// θ* / (exp(θ* s) - 1), which tends to b/L as the SLO loosens. A slice
// with 2L - s ≥ slo carries nothing: a request that meets a running batch
// may miss.
func QueueCapacity(c SliceConfig, slo time.Duration, quantile float64) float64 {
	if slo <= 0 {
		return c.Throughput
	}
	eps := 1 - quantile
	if !(eps > 0 && eps < 1) {
		eps = 1 - DefaultSLOQuantile
	}
	L := c.batchLatency()
	s := L / float64(c.Batch)
	slack := slo.Seconds() - 2*L + s
	if slack <= 0 {
		return 0
	}
	theta := math.Log(1/eps) / slack
	return min(theta/math.Expm1(theta*s), c.Throughput)
}

// PredictResponse is the model's bound on a replica of c's response time
// at quantile for Poisson arrivals at rate (req/s): 2L - s + ln(1/ε)/θ with
// θ the root of rate (exp(θs) - 1) = θ (see QueueCapacity); +Inf at or
// above the full-batch throughput, where the queue grows without bound.
func PredictResponse(c SliceConfig, rate, quantile float64) time.Duration {
	L := c.batchLatency()
	eps := 1 - quantile
	s := L / float64(c.Batch)
	if rate <= 0 {
		return time.Duration((2*L - s) * float64(time.Second))
	}
	if rate >= c.Throughput || !(eps > 0 && eps < 1) {
		return time.Duration(math.MaxInt64)
	}
	// f(θ) = rate(exp(θs) - 1) - θ is negative just above 0 (rate·s < 1)
	// and convex: bisect between 0 and a θ where it is positive.
	f := func(th float64) float64 { return rate*math.Expm1(th*s) - th }
	lo, hi := 0.0, 1/s
	for f(hi) <= 0 {
		hi *= 2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if f(mid) < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	w := math.Log(1/eps) / hi
	return time.Duration((2*L - s + w) * float64(time.Second))
}
