package scheduler

import (
	"math"
	"testing"
	"time"
)

// mD1Miss is the share of an M/D/1 queue's requests answered later than
// slo: its wait W exceeds slo - d, by Erlang's formula for the wait,
// P(W ≤ t) = (1 - ρ) Σ_{k ≤ t/d} (λ(kd - t))^k / k! e^{-λ(kd - t)}.
func mD1Miss(rate, d, slo float64) float64 {
	t := slo - d
	rho := rate * d
	sum, fact := 0.0, 1.0
	for k := 0; float64(k)*d <= t; k++ {
		if k > 0 {
			fact *= float64(k)
		}
		x := rate * (float64(k)*d - t)
		sum += math.Pow(x, float64(k)) / fact * math.Exp(-x)
	}
	return 1 - (1-rho)*sum
}

// At batch 1 the chain is the M/D/1 queue: its share of requests over the
// SLO must be Erlang's, at every load (a whole GPU, so that the load's
// interference margin is nil).
func TestLoneChainIsMD1AtBatchOne(t *testing.T) {
	const d = 0.010 // 10 ms
	c := SliceConfig{SMPercent: 100, Batch: 1, Throughput: 1 / d, Steps: BatchSteps{{Batch: 1, Ms: 10}}}
	for _, slo := range []float64{0.015, 0.025, 0.040} {
		var ch chain
		if !ch.init(c, slo) {
			t.Fatalf("slo %.3f: no chain", slo)
		}
		for _, rho := range []float64{0.1, 0.3, 0.5, 0.7, 0.85} {
			rate := rho / d
			got, want := ch.missShare(rate, 1), mD1Miss(rate, d, slo) // eps 1: exact at every share
			if math.Abs(got-want) > 1e-4+1e-3*want {
				t.Errorf("slo %.0f ms, ρ %.2f: chain misses %.6f, M/D/1 %.6f", 1000*slo, rho, got, want)
			}
		}
	}
}

// The lone-replica model against the bound that times every batch at the
// slowest: never below it, above it where partial batches are fast, and
// carrying load where a request meeting a full running batch would miss
// (2L - L/b ≥ SLO) but one meeting a partial one would not. A config
// without its batch timings is valued as before. PredictResponse agrees
// with QueueCapacity: at the capacity within the SLO, past it (by the
// capacity's 1 % of throughput precision) above.
func TestLoneCapacity(t *testing.T) {
	timed := func(c SliceConfig, steps ...BatchStep) SliceConfig {
		copy(c.Steps[:], steps)
		return c
	}
	b4 := SliceConfig{SMPercent: 5, Batch: 4, Throughput: 4 / 0.018, SlowestMs: 18}
	b8 := SliceConfig{SMPercent: 50, Batch: 8, Throughput: 200} // 40 ms
	tests := []struct {
		name    string
		c       SliceConfig
		slo     time.Duration
		carries bool // the untimed bound carries load
	}{
		{"partial batches much faster than the full one", timed(b4, BatchStep{1, 10}, BatchStep{2, 13}, BatchStep{4, 18}), 40 * time.Millisecond, true},
		{"no room for a full running batch, room for a partial one", timed(b8, BatchStep{1, 12}, BatchStep{2, 14}, BatchStep{4, 20}, BatchStep{8, 40}), 70 * time.Millisecond, false},
		{"batch 1 slower than batch 8", timed(SliceConfig{SMPercent: 20, Batch: 8, Throughput: 8 / 0.0102, SlowestMs: 14.5},
			BatchStep{1, 14.5}, BatchStep{2, 12}, BatchStep{4, 10.5}, BatchStep{8, 10.2}), 29 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			untimed := tt.c
			untimed.Steps = BatchSteps{}
			before := QueueCapacity(untimed, tt.slo, DefaultSLOQuantile)
			if before != lundbergCapacity(tt.c, tt.slo, DefaultSLOQuantile) {
				t.Errorf("untimed %.2f, Lundberg %.2f: a config without timings must be valued as before", before, lundbergCapacity(tt.c, tt.slo, DefaultSLOQuantile))
			}
			if (before > 0) != tt.carries {
				t.Fatalf("untimed capacity %.2f: the case is not what it says", before)
			}
			got := QueueCapacity(tt.c, tt.slo, DefaultSLOQuantile)
			t.Logf("untimed %.1f req/s, timed %.1f req/s (full batches %.1f)", before, got, tt.c.Throughput)
			if got <= before*1.05 || got >= tt.c.Throughput {
				t.Errorf("timed capacity %.2f req/s, want above the untimed %.2f (by 5 %%) and below the full-batch %.2f", got, before, tt.c.Throughput)
			}
			if p := PredictResponse(tt.c, got, DefaultSLOQuantile); p > tt.slo+tt.slo/200 {
				t.Errorf("PredictResponse at the capacity %.1f req/s = %s, above the SLO %s", got, p, tt.slo)
			}
			if p := PredictResponse(tt.c, got+0.02*tt.c.Throughput, DefaultSLOQuantile); p <= tt.slo {
				t.Errorf("PredictResponse past the capacity = %s, within the SLO %s", p, tt.slo)
			}
		})
	}
}
