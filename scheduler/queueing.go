package scheduler

import (
	"math"
	"time"
)

// DefaultSLOQuantile is the share of requests that must meet the SLO: a
// latency SLO is read as a p99 target (docs/scheduling.md).
const DefaultSLOQuantile = 0.99

// MissBudget is the share of requests a quantile lets miss the SLO:
// 1 - quantile, DefaultSLOQuantile's where quantile is not in (0, 1).
func MissBudget(quantile float64) float64 {
	if eps := 1 - quantile; eps > 0 && eps < 1 {
		return eps
	}
	return 1 - DefaultSLOQuantile
}

// batchLatency is the time a replica of c computes one full batch.
func (c SliceConfig) batchLatency() float64 {
	if c.Throughput <= 0 || c.Batch <= 0 {
		return math.Inf(1)
	}
	return float64(c.Batch) / c.Throughput
}

// slowestBatch is the longest any batch of c takes, in seconds: the full
// batch's latency, or SlowestMs where a partial batch is slower.
func (c SliceConfig) slowestBatch() float64 {
	return max(c.batchLatency(), c.SlowestMs/1000)
}

// QueueCapacity is the Poisson request rate (req/s) one replica of c
// serves with at most 1-quantile of its requests slower than slo: the
// capacity the autoscaler plans with, below c.Throughput (full batches,
// no waiting). docs/scheduling.md derives it:
//
// A replica computes one batch of up to b requests in at most L (the
// slowest batch, SlowestMs: the full one's latency unless a partial one
// was measured slower) and takes the next batch of
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
//
// That bound is loose where partial batches are fast: at low load most
// batches are, and a request that finds the replica idle is answered in
// l(1). Where c carries its batch timings (Steps), QueueCapacity is the
// larger of the bound and the exact model of the replica's queue that
// times a batch of k by l(k) (loneCapacity, lonequeue.go).
func QueueCapacity(c SliceConfig, slo time.Duration, quantile float64) float64 {
	if slo <= 0 {
		return c.Throughput
	}
	return max(lundbergCapacity(c, slo, quantile), loneCapacity(c, slo, quantile))
}

// lundbergCapacity is QueueCapacity's bound that times every batch as the
// slowest (see QueueCapacity).
func lundbergCapacity(c SliceConfig, slo time.Duration, quantile float64) float64 {
	eps := MissBudget(quantile)
	s := c.batchLatency() / float64(c.Batch)
	slack := slo.Seconds() - 2*c.slowestBatch() + s
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
	lundberg := lundbergResponse(c, rate, quantile)
	if lone := loneResponse(c, rate, quantile); lone < lundberg.Seconds() {
		return time.Duration(lone * float64(time.Second))
	}
	return lundberg
}

// lundbergResponse is PredictResponse's bound that times every batch as
// the slowest (see QueueCapacity).
func lundbergResponse(c SliceConfig, rate, quantile float64) time.Duration {
	L := c.slowestBatch()
	eps := 1 - quantile
	s := c.batchLatency() / float64(c.Batch)
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

// A function's replicas share one queue (pull dispatch, scheduler.Pull):
// a request starts on whichever replica frees first, so n replicas serve
// more at the SLO than n replicas each behind its own queue, the sum of
// their QueueCapacity. At a tight SLO the difference is most of the
// capacity: a lone replica whose batch takes over half the SLO holds it
// only for requests that find it idle, a few % of its throughput, where a
// pool of ten almost always has one idle (docs/scheduling.md, "Capacity
// of a pool").
//
// poolServes reports whether replicas cs hold the SLO at quantile for
// Poisson arrivals at rate. It takes the best of three views; at the
// capacity their best gives, every pinned pool measured held the SLO
// within 1 % (contention on; docs/evaluation.md, "Pooled capacity against
// the simulator"):
//
//   - apart: the replicas' QueueCapacity summed, as if each had its own
//     queue (apartCapacity);
//   - one at a time: an M/D/n queue whose servers take one request for a
//     crowded slowest batch L (singlesMissShare): tight for batch-1 pools;
//   - batched: the pool as n·b slots that free a batch at a time, and the
//     requests that join a busy replica's next batch (pooledMissShare):
//     a free replica takes up to b of what waits, so the pool's rate
//     grows with its queue, which the one-at-a-time view leaves out.
func poolServes(cs []SliceConfig, rate float64, slo time.Duration, quantile float64) bool {
	if rate <= 0 {
		return true
	}
	if len(cs) == 0 {
		return false
	}
	if slo <= 0 {
		total := 0.0
		for _, c := range cs {
			total += c.Throughput
		}
		return total >= rate
	}
	eps := MissBudget(quantile)
	if apartCapacity(cs, rate, slo, quantile) >= rate {
		return true
	}
	if singlesMissShare(cs, rate, slo) <= eps || pooledMissShare(cs, rate, slo) <= eps {
		return true
	}
	// Both pooled views time the pool by its slowest replica, so one
	// replica whose crowded batch cannot follow a wait within the SLO
	// makes them miss everything, whatever else the pool holds. Such a
	// replica serves only what it holds apart, and the rest are a pool
	// without it. It happens when the SLO feedback tightens the planning
	// SLO under replicas chosen at the function's own: valued whole,
	// densenet169's 25 replicas in family12's v15 at -slo-margin 1.15
	// (twenty of 5 %, 52 ms a request, chosen at 75 ms and planned at
	// 61) read 3.6 req/s against 179, and one tick asked for 175 more
	// (docs/evaluation.md, "A slow replica does not sink its pool").
	fast, slow := splitPoolable(cs, slo)
	if len(slow) == 0 || len(fast) == 0 {
		return false
	}
	return poolServes(fast, rate-apartCapacity(slow, rate, slo, quantile), slo, quantile)
}

// splitPoolable parts cs into the replicas the pooled views can time
// within slo and those too slow to: a crowded slowest batch L, of b
// requests, whose wait in the batched view (2L - L/b and the lump term,
// see pooledMissShare) alone reaches slo. The slow ones include those
// the one-at-a-time view cannot time (L ≥ slo), since that wait is at
// least L.
func splitPoolable(cs []SliceConfig, slo time.Duration) (fast, slow []SliceConfig) {
	for _, c := range cs {
		if timedInPool(c, slo, len(cs)) {
			fast = append(fast, c)
		} else {
			slow = append(slow, c)
		}
	}
	return fast, slow
}

// timedInPool reports whether the batched view can time a replica of c
// in a pool of n within slo (see splitPoolable).
func timedInPool(c SliceConfig, slo time.Duration, n int) bool {
	L := c.crowded().slowestBatch()
	return !math.IsInf(L, 1) && L > 0 && pooledWait(c, L, n) < slo.Seconds()
}

// pooledWait is the batched view's time before a queued request of a
// pool of n starts to count against the SLO on a replica of c whose
// batch takes L (see pooledMissShare): its own batch, the rest of a
// running one, and half the lump its batch frees its slots in.
func pooledWait(c SliceConfig, L float64, n int) float64 {
	b := float64(max(c.Batch, 1))
	return 2*L - L/b + L/float64(2*max(n, 1))*(1-1/b)
}

// poolable reports whether a replica of c can be timed in a pool of any
// size at slo (see splitPoolable; a large pool's lump is nil).
func poolable(c SliceConfig, slo time.Duration) bool {
	return timedInPool(c, slo, math.MaxInt32)
}

// apartCapacity is poolServes's apart view at rate: a lone replica's
// QueueCapacity as profiled (calibrated alone, TestQueueModelAgainstSimulatedWaits);
// for a pool, the sum of each replica's timed at the interference of
// neighbours busy as often as the pool is (rate over its full-batch
// throughput, slowed): the pool's own replicas share GPUs, and at a loose
// SLO, where the sum nears the full-batch throughput, they are busy
// together. Summed as profiled, ten resnet50 replicas at a 119-ms SLO
// rated 2127 req/s missed 100 % there (contention on; the simulator
// holds 2028). Never below the best replica's alone.
func apartCapacity(cs []SliceConfig, rate float64, slo time.Duration, quantile float64) float64 {
	if len(cs) == 1 {
		return QueueCapacity(cs[0], slo, quantile)
	}
	full := 0.0
	for _, c := range cs {
		full += c.Throughput
	}
	busy := min(1, rate/full)
	// A plan's pools are mostly copies of one slice (plus): its capacity
	// is worked out once per run of equal slices, summed in the same order.
	sum, alone, capacity := 0.0, 0.0, 0.0
	for i, c := range cs {
		if i == 0 || c != cs[i-1] {
			// The partial-batch model is timed crowded already.
			capacity = max(lundbergCapacity(c.slowed(busy), slo, quantile), loneCapacity(c, slo, quantile))
			alone = max(alone, QueueCapacity(c, slo, quantile))
		}
		sum += capacity
	}
	return max(sum, alone)
}

// crowded is c timed at the interference margin: 1 + Interference x
// (1 - f) its profiled latency for a replica with f of a GPU.
func (c SliceConfig) crowded() SliceConfig {
	return c.slowed(1)
}

// slowed is c timed as if a share busy of its GPU's other SMs were
// computing (1: all of them): 1 + Interference x (1 - f) x busy its
// profiled latency.
func (c SliceConfig) slowed(busy float64) SliceConfig {
	k := 1 + Interference*(1-float64(c.SMPercent)/100)*busy
	c.SlowestMs = c.slowestBatch() * 1000 * k
	c.Throughput /= k
	for i := range c.Steps {
		c.Steps[i].Ms *= float32(k)
	}
	c.Lone = LoneRate{} // cached at the profiled timings
	return c
}

// singlesMissShare is the one-at-a-time view's share of requests slower
// than slo (see poolServes): n servers that each clear a request at
// least every s_i (perRequest: the slowest measured batch per request it
// holds, a lone request's batch 1 where batching pays), crowded (every
// neighbour busy). A request waits with Erlang C's probability C(n, a),
// a = λ n / m, m = Σ 1/s_i, and its wait's tail decays at Lundberg's θ for
// a server of 1/m per request (M/D/n in heavy traffic); it misses when it
// waits more than slo - max L_i, its own batch timed at the slowest L_i.
// Timing the queue by L_i too, as for a slice of batch 1, rated a pool of
// batch-2 slices at half what it holds (convnext_base at 2.5x, x1.95;
// docs/evaluation.md, "A pool's queue at its per-request time").
// 1 where the pool cannot serve rate.
func singlesMissShare(cs []SliceConfig, rate float64, slo time.Duration) float64 {
	n := len(cs)
	m, slowest := 0.0, 0.0
	for _, c := range cs {
		crowded := c.crowded()
		L := crowded.slowestBatch()
		if math.IsInf(L, 1) || L <= 0 {
			return 1
		}
		m += 1 / crowded.perRequest()
		slowest = max(slowest, L)
	}
	t := slo.Seconds() - slowest
	if t < 0 || rate >= m {
		return 1
	}
	return erlangC(n, rate*float64(n)/m) * math.Exp(-decayRate(rate, 1/m)*t)
}

// perRequest is the longest a replica of c spends per request in any
// batch it may run, in seconds: the largest measured latency of a step
// over the fewest requests that run at it (a batch of 3 runs at batch
// 4's latency). Untimed: its slowest batch, as if it took one request a
// batch.
func (c SliceConfig) perRequest() float64 {
	L := c.slowestBatch()
	if !c.timed() {
		return L
	}
	worst, fewest := 0.0, 1
	for _, st := range c.Steps {
		if st.Batch <= 0 || int(st.Batch) > max(c.Batch, 1) {
			break
		}
		worst = max(worst, float64(st.Ms)/1000/float64(fewest))
		fewest = int(st.Batch) + 1
	}
	if worst <= 0 {
		return L
	}
	return min(worst, L)
}

// pooledMissShare is the batched view's share of requests slower than
// slo (see poolServes, docs/scheduling.md "Capacity of a pool"); 1 where
// the pool cannot serve rate. Two ways to miss, added:
//
//   - queued: every replica holds a full batch, and the request waits in
//     the function's queue. Count the pool as c = Σ b_i slots of a
//     crowded slowest batch L_i each, an M/D/c queue of m = Σ b_i/L_i
//     requests a second: it waits with Erlang C's C(c, λc/m), its wait
//     decays at Lundberg's θ for 1/m a request, and it misses past
//     slo - (2L - L/b) - L/(2n)(1 - 1/b): its own batch, the rest of a
//     running one (as alone), and half the lump a batch frees its b
//     slots in at once (the k-th slot comes up to L/n (1 - 1/b) later
//     than from slots that free one by one; half of it on average).
//   - late: the request finds every replica busy (Erlang C over the n
//     replicas, each busy one request's batch) and joins one's next
//     batch, waiting out the running one: it misses when the two batches
//     take more than the SLO, the rest of the running one spread evenly
//     over a batch. Timed at the interference of neighbours busy as
//     often as a replica holding any of the λL/n requests it is handed
//     in a batch's time (1 - exp(-λL/n)), not every neighbour always.
func pooledMissShare(cs []SliceConfig, rate float64, slo time.Duration) float64 {
	n, slots := len(cs), 0
	m, wait, sumL := 0.0, 0.0, 0.0
	for _, c := range cs {
		L := c.crowded().slowestBatch()
		if math.IsInf(L, 1) || L <= 0 {
			return 1
		}
		slots += max(c.Batch, 1)
		m += float64(max(c.Batch, 1)) / L
		sumL += L
		wait = max(wait, pooledWait(c, L, n))
	}
	t := slo.Seconds() - wait
	if t < 0 || rate >= m {
		return 1
	}
	queued := erlangC(slots, rate*float64(slots)/m) * math.Exp(-decayRate(rate, 1/m)*t)
	busyShare := -math.Expm1(-rate * sumL / float64(n) / float64(n))
	late, perServer := 0.0, 0.0
	for _, c := range cs {
		L := c.slowed(busyShare).slowestBatch()
		perServer += 1 / L
		late = max(late, min(1, max(0, (2*L-slo.Seconds())/L)))
	}
	busy := 1.0
	if a := rate * float64(n) / perServer; a < float64(n) {
		busy = erlangC(n, a)
	}
	return queued + busy*late
}

// decayRate is θ > 0 with rate (exp(θs) - 1) = θ: the exponential decay of
// the wait's tail behind a server that takes s per request (Lundberg; for
// n servers of fixed time L, s = L/n, the decay of M/D/n's wait in
// heavy traffic, where M/M/n's m - λ would time the work as exponential).
// rate s < 1.
func decayRate(rate, s float64) float64 {
	// f(θ) = rate (exp(θs) - 1) - θ is convex, 0 at 0 and negative just
	// above: Newton's method from a θ where f > 0 falls to the root from
	// above, never past it, and converges in a few steps (the autoscaler
	// asks this for every function at every tick).
	th := 1 / s
	for rate*math.Expm1(th*s)-th <= 0 {
		th *= 2
	}
	for range 100 {
		e := math.Exp(th * s)
		next := th - (rate*(e-1)-th)/(rate*s*e-1)
		if th-next <= 1e-12*th {
			return next
		}
		th = next
	}
	return th
}

// erlangC is the probability that an arrival waits in an M/M/n queue of
// offered load a (Erlangs, a < n), by the stable recursion on Erlang B.
func erlangC(n int, a float64) float64 {
	b := 1.0
	for k := 1; k <= n; k++ {
		b = a * b / (float64(k) + a*b)
	}
	rho := a / float64(n)
	return b / (1 - rho + rho*b)
}

// PoolCapacity is the largest Poisson rate (req/s) replicas cs hold the
// SLO at quantile for, sharing one queue (see poolServes), below their
// summed full-batch throughput; found by bisection from 0, as the apart
// view depends on the rate.
func PoolCapacity(cs []SliceConfig, slo time.Duration, quantile float64) float64 {
	hi := 0.0
	for _, c := range cs {
		hi += c.Throughput
	}
	if slo <= 0 {
		return hi
	}
	lo := 0.0
	if lo >= hi {
		return lo
	}
	for range 40 {
		mid := (lo + hi) / 2
		if poolServes(cs, mid, slo, quantile) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

// Interference is how much slower a batch runs per whole GPU of busy
// neighbours (memory bandwidth, L2), the pooled view's margin
// for co-located replicas: a replica with f of a GPU is timed at
// 1 + Interference x (1 - f) its profiled latency, as if the rest of its
// GPU were busy. FaST-GShare's slide 17 puts it near 0.25
// (docs/evaluation.md, "Calibration on slide 17").
const Interference = 0.25

// PlanFromZero is the set of replicas Autoscale starts for a function
// that has none, at a steady rate (req/s) with SLO slo: the pool of least
// total cost (the larger of SM % and memoryPercent, per replica) over the
// slices of configs that carry load at the SLO's quantile, found by the
// autoscaler's own search (fill: for each slice the fewest copies that
// hold the SLO as a pool, the cheapest of those, the last copy
// right-sized), at most maxReplicas of them, then the cheapest slice until
// there are minReplicas (at least one; at a rate of 0, all there is). With
// slo 0 it plans for the rate itself, without Autoscale's headroom. It is
// exported for the
// simulator's queueing-aware lower bound (sim.LowerBound), which prices a
// window's load with the plan the autoscaler would make for it, so that
// the bound and the policy share one model (docs/evaluation.md, "A
// queueing-aware bound"). nil: no slice carries load at the SLO.
func PlanFromZero(configs []SliceConfig, rate float64, slo time.Duration, quantile, memoryPercent float64, minReplicas, maxReplicas int) []SliceConfig {
	sz := newSizer(slo, quantile, memoryPercent)
	menu := sz.menu(configs)
	if len(menu) == 0 {
		return nil
	}
	best := mostEfficient(menu, sz.capOf, sz.cost)
	var out []SliceConfig
	if rate >= 1e-3 {
		out = fill(menu, nil, rate, maxReplicas, best, sz)
	}
	for len(out) < max(minReplicas, 1) && len(out) < maxReplicas {
		out = append(out, smallestCovering(menu, 0, best, sz.capOf, sz.cost))
	}
	return out
}
