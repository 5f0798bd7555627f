package scheduler

import (
	"math"
	"slices"
	"time"
)

// maxSteps is how many batch sizes a SliceConfig times (Steps): the
// measured tables have four (1, 2, 4, 8); a profile with more up to its
// batch keeps the model before (every batch timed as the slowest). Few
// and small, as the sizer copies configs in its searches.
const maxSteps = 6

// BatchStep is the measured latency of a batch of up to Batch requests.
type BatchStep struct {
	Batch int32   `json:"batch"`
	Ms    float32 `json:"ms"`
}

// BatchSteps are a slice's measured batch sizes up to its batch, smallest
// first; unused entries are zero. An array, not a slice, so that
// SliceConfig stays comparable (the autoscaler matches replicas to menu
// entries with ==).
type BatchSteps [maxSteps]BatchStep

// LoneRate caches the partial-batch model's capacity of one replica
// (loneCapacity) at one SLO and quantile: ConfigsFromProfile works it out
// once for the menu, where the autoscaler would otherwise solve the chain
// for every slice at every tick. Zero: not cached.
type LoneRate struct {
	SLO      time.Duration `json:"slo"`
	Quantile float64       `json:"quantile"`
	Rate     float64       `json:"rate"`
}

// timed reports whether c knows the latency of each batch size it runs.
func (c SliceConfig) timed() bool { return c.Steps[0].Batch > 0 }

// maxChainStates bounds the chain chain.missShare solves (a banded linear
// system; missShare grows it to there where the queue runs long), and
// firstCut the cut it starts from: past it, at an SLO of many batches,
// the model falls back to Lundberg's bound, which is tight there
// (docs/evaluation.md, "Pooled capacity against the simulator": x1.01-1.06
// at 6x).
const (
	maxChainStates = 512
	firstCut       = 128
)

// nearFull is the share of its full-batch throughput past which a
// replica's Lundberg rate is left as it is: the chain could add no more
// than the rest, and at the loose SLOs where it happens its states are
// many.
const nearFull = 0.90

// loneCapacity is the partial-batch model's rate for one replica of c
// (0 where c has no Steps, its Lundberg rate is near full already, or the
// chain is too large): the largest Poisson rate at which the chain's
// share of requests over the SLO (chain.missShare), its batches timed
// slower by neighbours busy as often as the replica is (the Interference
// margin, as the apart view times a pool), is at most 1 - quantile. Read
// from c.Lone where it was cached for this SLO and quantile.
func loneCapacity(c SliceConfig, slo time.Duration, quantile float64) float64 {
	if !c.timed() || slo <= 0 {
		return 0
	}
	if c.Lone.SLO == slo && c.Lone.Quantile == quantile {
		return c.Lone.Rate
	}
	eps := MissBudget(quantile)
	if lundbergCapacity(c, slo, quantile) >= nearFull*c.Throughput {
		return 0 // Lundberg's bound is tight there; the chain would be large
	}
	var ch chain
	if !ch.init(c, slo.Seconds()) {
		return 0
	}
	// The miss share grows with the rate, about exponentially below
	// the capacity: find where its log crosses log ε by regula falsi
	// (Illinois), within 1 % of the full-batch throughput (a plan's rate
	// is no finer), from a first probe at Lundberg's rate, where the
	// answer often is near. Each probe solves the chain once.
	target := math.Log(eps)
	h := func(rate float64) float64 { return math.Log(max(ch.missShare(rate, eps), 1e-300)) - target }
	lo, hi := 0.0, c.Throughput*(1-1e-9)
	hlo, hhi := math.Inf(-1), h(hi)
	if hhi <= 0 {
		return hi
	}
	if l := lundbergCapacity(c, slo, quantile); l > 0 {
		if v := h(l); v <= 0 {
			lo, hlo = l, v
		} else {
			hi, hhi = l, v
		}
	}
	side := 0
	for range 30 {
		if hi-lo <= 1e-2*c.Throughput {
			break
		}
		mid := (lo + hi) / 2
		if !math.IsInf(hlo, -1) && hhi-hlo > 0 {
			mid = lo + (hi-lo)*(-hlo)/(hhi-hlo)
			// Keep off the ends, where regula falsi stalls.
			mid = min(max(mid, lo+0.05*(hi-lo)), hi-0.05*(hi-lo))
		}
		v := h(mid)
		if v <= 0 {
			lo, hlo = mid, v
			if side == -1 {
				hhi /= 2
			}
			side = -1
		} else {
			hi, hhi = mid, v
			if side == 1 {
				hlo /= 2
			}
			side = 1
		}
	}
	return lo
}

// loneResponse is the partial-batch model's bound on a replica of c's
// response at quantile for Poisson arrivals at rate: the least t at which
// the chain's share of requests slower than t is at most 1 - quantile
// (timed as in loneCapacity); +Inf where c has no Steps or the queue does
// not settle.
func loneResponse(c SliceConfig, rate, quantile float64) float64 {
	eps := 1 - quantile
	if !c.timed() || !(eps > 0 && eps < 1) {
		return math.Inf(1)
	}
	if rate >= c.Throughput {
		return math.Inf(1)
	}
	// The chain's size depends on the SLO: grow the bracket until the
	// share at hi is within eps, then bisect.
	lo, hi := 0.0, 2*c.slowestBatch()
	var ch chain
	for {
		if !ch.init(c, hi) {
			return math.Inf(1)
		}
		if ch.missShare(rate, eps) <= eps {
			break
		}
		lo, hi = hi, 2*hi
	}
	for hi-lo > 1e-4*hi {
		mid := (lo + hi) / 2
		if !ch.init(c, mid) {
			lo = mid // below l(1)
			continue
		}
		if ch.missShare(rate, eps) <= eps {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// chain is one replica's queue as batches start and end: the bulk-service
// queue M/G^(1,b)/1 whose batch of k takes its measured latency l(k)
// (docs/scheduling.md, "A lone replica's capacity"). The state X is how
// many wait when a batch ends. From X = 0 the replica idles until the
// next arrival, which runs alone (k = 1, m = 0 left waiting); from X ≥ 1
// it takes k = min(X, b), leaving m = X - k. The next state is m plus the
// Poisson arrivals of its batch's time D = l(k).
//
// A request that arrives u into such a batch finds q = m + N(λu) ahead
// of it (FIFO). Its own batch starts τ = (D - u) + ⌊q/b⌋ l(b) later (the
// rest of the running batch, then full batches ahead) and holds its place
// r = q mod b + 1 and whoever arrives in τ, up to b: s = min(b, r +
// N(λτ)). It misses when τ + l(s) > slo. The batch's expected misses are
// ∫₀ᴰ λ Σ_n P(N(λu) = n) P(τ + l(s) > slo) du (3-point Gauss-Legendre between the
// u where τ + l(s) crosses the SLO, exact in n and s) against its λD
// arrivals; one that finds the replica idle is answered in l(1). Weighted
// by the chain's stationary law over cycles (renewal reward, PASTA),
// their ratio is the share of requests slower than slo. The chain is cut
// where every arrival misses anyway; the cut state counts all its
// requests as missed.
type chain struct {
	b     int
	slo   float64
	full  float64   // l(b)
	latOf []float64 // l(k), k = 0..b (0 unused)
	lgam  []float64 // ln n!
	// profiled are c's step latencies (s) before the load's slowdown.
	profiled []float64
	k1       float64 // the slowdown per unit of the replica's load
	tput     float64 // the full-batch throughput as profiled
	states   int
	p, pi    []float64
	levels   []float64 // the distinct l(s), s = 1..b
	cuts, pj []float64
}

// init sets the chain up for c as profiled and slo in seconds; false
// where it would be too large or c cannot meet slo even alone.
func (ch *chain) init(c SliceConfig, slo float64) bool {
	b := max(c.Batch, 1)
	ch.b, ch.slo = b, slo
	ch.tput = c.Throughput
	full := c.batchLatency()
	if math.IsInf(full, 1) || full <= 0 {
		return false
	}
	if cap(ch.profiled) < b+1 {
		ch.profiled = make([]float64, b+1)
		ch.latOf = make([]float64, b+1)
	}
	ch.profiled, ch.latOf = ch.profiled[:b+1], ch.latOf[:b+1]
	k := 1
	for _, st := range c.Steps {
		if st.Batch == 0 {
			break
		}
		for ; k <= min(int(st.Batch), b); k++ {
			ch.profiled[k] = float64(st.Ms) / 1000
		}
	}
	for ; k <= b; k++ {
		ch.profiled[k] = full
	}
	ch.k1 = Interference * (1 - float64(c.SMPercent)/100)
	if ch.profiled[1] > slo {
		return false
	}
	// Past b (slo/l(b) + 2) waiting, the full batches ahead alone pass
	// the SLO: every arrival there misses.
	n := b*(int(slo/full)+2) + b
	if n > firstCut {
		return false
	}
	ch.states = n
	if len(ch.lgam) < n+64 {
		ch.lgam = make([]float64, n+64)
		for i := 1; i < len(ch.lgam); i++ {
			ch.lgam[i] = ch.lgam[i-1] + math.Log(float64(i))
		}
	}
	return true
}

// timeAt times the batches at rate: slowed by neighbours busy as often as
// the replica is (rate over its full-batch throughput, see slowed), the
// apart view's margin for a pool's replicas.
func (ch *chain) timeAt(rate float64) {
	k := 1 + ch.k1*min(1, rate/ch.tput)
	for i := 1; i <= ch.b; i++ {
		ch.latOf[i] = ch.profiled[i] * k
	}
	ch.full = ch.latOf[ch.b]
	ch.levels = ch.levels[:0]
	for i := 1; i <= ch.b; i++ {
		if !slices.Contains(ch.levels, ch.latOf[i]) {
			ch.levels = append(ch.levels, ch.latOf[i])
		}
	}
}

// missShare is the share of requests slower than slo at Poisson rate,
// exact to where it passes eps. The chain is cut first past where every
// arrival misses, what would pass the cut folded onto it: the folded
// chain drains from the cut faster than the queue would from beyond it,
// so it understates the misses. Where its share is past eps already, the
// true one is too; else, where the cut still holds more than cutMass of
// the batch ends, the cut is moved up (doubling, to maxChainStates; past
// it, 1).
func (ch *chain) missShare(rate, eps float64) float64 {
	ch.timeAt(rate)
	if rate*ch.full >= float64(ch.b) {
		return 1
	}
	for n := ch.states; ; n = min(2*n, maxChainStates) {
		folded, ok := ch.solve(rate, n)
		if !ok {
			return 1
		}
		share := ch.share(rate, n)
		if share > eps || folded <= cutMass {
			return share
		}
		if n == maxChainStates {
			return 1
		}
	}
}

// cutMass is the stationary share of batch ends the chain's cut state may
// hold (see missShare).
const cutMass = 1e-7

// solve fills ch.pi with the stationary law of the chain cut at n states
// and reports the cut state's share; false where it is singular.
func (ch *chain) solve(rate float64, n int) (float64, bool) {
	if len(ch.p) < n*n {
		ch.p = make([]float64, n*n)
		ch.pi = make([]float64, n)
	}
	p, pi := ch.p[:n*n], ch.pi[:n]
	clear(p)
	// Transitions: row X, column Y; what passes the cut lands on it.
	for x := range n {
		_, m, d := ch.cycle(x)
		mean := rate * d
		pj := math.Exp(-mean)
		left := 1.0
		for j := 0; m+j < n-1; j++ {
			p[x*n+m+j] += pj
			left -= pj
			pj *= mean / float64(j+1)
		}
		p[x*n+n-1] += max(left, 0)
	}
	if !stationary(p, pi, n, ch.b) {
		return 0, false
	}
	return pi[n-1], true
}

// share is the share of requests slower than slo, from ch.pi over n states.
func (ch *chain) share(rate float64, n int) float64 {
	pi := ch.pi[:n]
	missed, arrived := 0.0, 0.0
	for x := range n {
		_, m, d := ch.cycle(x)
		a := rate * d
		miss := a
		if x < n-1 {
			miss = ch.batchMisses(rate, m, d)
		}
		if x == 0 {
			a++ // the arrival that ends the idle time, answered in l(1)
		}
		missed += pi[x] * miss
		arrived += pi[x] * a
	}
	if arrived <= 0 {
		return 1
	}
	return min(1, missed/arrived)
}

// cycle is the batch state x starts: its size, what it leaves waiting and
// its time.
func (ch *chain) cycle(x int) (k, m int, d float64) {
	k = min(max(x, 1), ch.b)
	m = max(x-k, 0)
	return k, m, ch.latOf[k]
}

// poisson is P(N = n) for N ~ Poisson(mean).
func (ch *chain) poisson(n int, mean float64) float64 {
	if mean <= 0 {
		if n == 0 {
			return 1
		}
		return 0
	}
	return math.Exp(float64(n)*math.Log(mean) - mean - ch.lgam[n])
}

// ownMiss is the probability that a request at place r of its own batch
// misses, the batch starting tau after its arrival and pj[j] = P(N(λ tau)
// = j) for j < b: tau + l(min(b, r + N(λ tau))) > slo.
func (ch *chain) ownMiss(tau float64, r int, pj []float64) float64 {
	left := ch.slo - tau
	if left < 0 {
		return 1
	}
	miss, cdf := 0.0, 0.0
	for j := 0; r+j < ch.b; j++ {
		if ch.latOf[r+j] > left {
			miss += pj[j]
		}
		cdf += pj[j]
	}
	if ch.latOf[ch.b] > left {
		miss += max(0, 1-cdf)
	}
	return miss
}

// gauss are 3-point Gauss-Legendre nodes and weights on [-1, 1]: exact
// for polynomials of degree 5, and the integrand is smooth between cuts.
var gauss = [3][2]float64{
	{-0.7745966692414834, 5.0 / 9},
	{0, 8.0 / 9},
	{0.7745966692414834, 5.0 / 9},
}

// batchMisses is the expected number of a batch's arrivals slower than
// slo, for a batch of time d with m waiting at its start (see chain). The
// n-th arrival of the batch (q = m + n ahead) misses for u below the
// points where τ + l(s) crosses the SLO; those depend on n only through
// the full batches ahead, ⌊q/b⌋, so the arrivals of one such block share
// their quadrature nodes and P(N(λu) = n) is carried from n to n+1.
func (ch *chain) batchMisses(rate float64, m int, d float64) float64 {
	b := ch.b
	mean := rate * d
	if cap(ch.pj) < b {
		ch.pj = make([]float64, b)
	}
	pj := ch.pj[:b]
	total := 0.0
	// tail is P(N(λd) ≥ n+1): what the n-th arrival can add at most.
	pd := math.Exp(-mean)
	tail := 1 - pd
	n := 0
	for block := m / b; tail > 1e-12; block++ {
		f := float64(block) * ch.full
		n0, n1 := n, (block+1)*b-m // the block's arrivals: n0 ≤ n < n1
		// The fastest and slowest own batch of the block's places.
		lo, hi := math.Inf(1), 0.0
		for s := (m+n0)%b + 1; s <= b; s++ {
			lo, hi = min(lo, ch.latOf[s]), max(hi, ch.latOf[s])
		}
		if f+lo > ch.slo {
			// Every arrival from here on misses (it waits at least f):
			// the rest is E[(N - n0)^+], N ~ Poisson(λd).
			rest := mean
			pk, cdf := math.Exp(-mean), 0.0
			for j := 0; j < n0; j++ {
				cdf += pk
				rest -= 1 - cdf
				pk *= mean / float64(j+1)
			}
			return total + max(rest, 0)
		}
		if d+f+hi > ch.slo {
			ch.cuts = append(ch.cuts[:0], 0, d)
			for _, l := range ch.levels {
				if u := d + f + l - ch.slo; u > 0 && u < d {
					ch.cuts = append(ch.cuts, u)
				}
			}
			slices.Sort(ch.cuts)
			for i := 1; i < len(ch.cuts); i++ {
				a, z := ch.cuts[i-1], ch.cuts[i]
				if z <= a {
					continue
				}
				half, mid := (z-a)/2, (z+a)/2
				for _, g := range gauss {
					u := mid + half*g[0]
					tau := d - u + f
					// P(N(λτ) = j), j < b: who joins the own batch.
					x := rate * tau
					pj[0] = math.Exp(-x)
					for j := 1; j < b; j++ {
						pj[j] = pj[j-1] * x / float64(j)
					}
					w := half * g[1] * rate
					pu := ch.poisson(n0, rate*u)
					for k := n0; k < n1; k++ {
						total += w * pu * ch.ownMiss(tau, (m+k)%b+1, pj)
						pu *= rate * u / float64(k+1)
					}
				}
			}
		}
		for ; n < n1; n++ {
			pd *= mean / float64(n+1)
			tail -= pd
		}
	}
	return total
}

// stationary solves pi P = pi, Σ pi = 1 for the n-state transition matrix
// p (row-major; overwritten) of a chain that falls at most b states a
// step, by Gaussian elimination on (P - I)ᵀ with the states in reverse
// order, which puts its nonzeros on and above the diagonal and within b
// below it (elimination touches b rows a column), and the last equation
// replaced by the normalisation. (I - P)ᵀ is diagonally dominant by
// columns, so no pivoting is needed. False if singular.
func stationary(p, pi []float64, n, b int) bool {
	// a[i][j] = P[n-1-j][n-1-i] - δij, in place: the transpose of P with
	// both indices reversed is P mirrored on the anti-diagonal.
	for i := range n {
		for j := range n - i {
			// (i, j) ↔ (n-1-j, n-1-i); each pair once.
			k, l := n-1-j, n-1-i
			if i*n+j < k*n+l {
				p[i*n+j], p[k*n+l] = p[k*n+l], p[i*n+j]
			}
		}
		p[i*n+i]--
	}
	for j := range n {
		p[(n-1)*n+j] = 1
	}
	clear(pi)
	pi[n-1] = 1
	for col := range n - 1 {
		d := p[col*n+col]
		if math.Abs(d) < 1e-300 {
			return false
		}
		inv := 1 / d
		eliminate := func(r int) {
			f := p[r*n+col] * inv
			if f == 0 {
				return
			}
			row, piv := p[r*n+col:r*n+n], p[col*n+col:col*n+n]
			for j := range row {
				row[j] -= f * piv[j]
			}
			pi[r] -= f * pi[col]
		}
		for r := col + 1; r <= min(col+b, n-2); r++ {
			eliminate(r)
		}
		eliminate(n - 1)
	}
	if math.Abs(p[(n-1)*n+n-1]) < 1e-300 {
		return false
	}
	for r := n - 1; r >= 0; r-- {
		s := pi[r]
		for j := r + 1; j < n; j++ {
			s -= p[r*n+j] * pi[j]
		}
		pi[r] = s / p[r*n+r]
	}
	// Back to the states' order.
	slices.Reverse(pi)
	for i := range n {
		pi[i] = max(pi[i], 0)
	}
	return true
}
