package scheduler

import (
	"math"
	"testing"
	"time"
)

// One replica's sample path is the queue the lone chain solves exactly
// (a replica handed requests while it runs takes them, and what waits, up
// to b as its next batch): on a whole GPU, where neither times
// interference, their capacities must agree within the path's sampling
// error and the bisections' 1 % steps. At batch 1 it is M/D/1.
func TestPathAgreesWithLoneChain(t *testing.T) {
	timed := func(c SliceConfig, steps ...BatchStep) SliceConfig {
		copy(c.Steps[:], steps)
		return c
	}
	tests := []struct {
		name string
		c    SliceConfig
		slo  time.Duration
	}{
		{"batch 1 (M/D/1)", timed(SliceConfig{SMPercent: 100, Batch: 1, Throughput: 100}, BatchStep{1, 10}), 25 * time.Millisecond},
		{"batch 4, fast partial batches", timed(SliceConfig{SMPercent: 100, Batch: 4, Throughput: 4 / 0.018}, BatchStep{1, 10}, BatchStep{2, 13}, BatchStep{4, 18}), 40 * time.Millisecond},
		{"batch 8, room for a partial running batch only", timed(SliceConfig{SMPercent: 100, Batch: 8, Throughput: 200}, BatchStep{1, 12}, BatchStep{2, 14}, BatchStep{4, 20}, BatchStep{8, 40}), 70 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chain := loneCapacity(tt.c, tt.slo, DefaultSLOQuantile)
			path := PoolPathCapacity(tt.c, 1, tt.slo, DefaultSLOQuantile)
			t.Logf("chain %.1f req/s, path %.1f req/s", chain, path)
			if chain <= 0 || math.Abs(path-chain) > 0.05*chain {
				t.Errorf("path %.1f req/s, chain %.1f: more than 5 %% apart", path, chain)
			}
		})
	}
}

// A pool's sample path against poolServes's views, which time every
// batch at the slowest: above them where partial batches are fast and
// several replicas share the queue, never past the pool's crowded
// full-batch throughput, and growing with the pool. A pair at a tight SLO
// is not above them: its crowded margin (24 % at 5 % of a GPU) costs more
// than the apart view's, timed at the pair's own load, and the partial
// batches win back. 0 where a batch of one misses the SLO alone
// or the slice has no batch timings.
func TestPoolPathCapacity(t *testing.T) {
	// The synthetic model of the simulator's calibration (10, 13, 18,
	// 28 ms at batches 1, 2, 4, 8) at 5 % of a GPU.
	synth := func(b int) SliceConfig {
		steps := BatchSteps{{1, 10}, {2, 13}, {4, 18}, {8, 28}}
		c := SliceConfig{SMPercent: 5, Batch: b, Throughput: float64(b) / (float64(steps[0].Ms) / 1000)}
		for i, s := range steps {
			if s.Batch > 0 && int(s.Batch) <= b {
				c.Steps[i] = s
				c.Throughput = float64(b) / (float64(s.Ms) / 1000)
			}
		}
		return c
	}
	tests := []struct {
		name  string
		c     SliceConfig
		n     int
		slo   time.Duration
		above bool // above poolServes's views
	}{
		{"pair, batch 2, tight", synth(2), 2, 25 * time.Millisecond, false},
		{"three, batch 2, tight", synth(2), 3, 25 * time.Millisecond, true},
		{"four, batch 2, tight", synth(2), 4, 25 * time.Millisecond, true},
		{"pair, batch 4, loose", synth(4), 2, 60 * time.Millisecond, true},
		{"four, batch 4, loose", synth(4), 4, 60 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool := make([]SliceConfig, tt.n)
			for i := range pool {
				pool[i] = tt.c
			}
			views := PoolCapacity(pool, tt.slo, DefaultSLOQuantile)
			got := PoolPathCapacity(tt.c, tt.n, tt.slo, DefaultSLOQuantile)
			crowded := float64(tt.n) * tt.c.crowded().Throughput
			t.Logf("views %.1f req/s, path %.1f req/s (crowded full batches %.1f)", views, got, crowded)
			if tt.above && got <= views*1.02 {
				t.Errorf("path %.1f req/s, want above the views' %.1f (by 2 %%)", got, views)
			}
			if got > crowded {
				t.Errorf("path %.1f req/s, past the crowded full-batch throughput %.1f", got, crowded)
			}
			if fewer := PoolPathCapacity(tt.c, tt.n-1, tt.slo, DefaultSLOQuantile); fewer > got {
				t.Errorf("%d replicas serve %.1f req/s, %d only %.1f", tt.n-1, fewer, tt.n, got)
			}
		})
	}
	untimed := synth(2)
	untimed.Steps = BatchSteps{}
	if got := PoolPathCapacity(untimed, 2, 25*time.Millisecond, DefaultSLOQuantile); got != 0 {
		t.Errorf("no batch timings: %.1f req/s, want 0", got)
	}
	if got := PoolPathCapacity(synth(2), 2, 9*time.Millisecond, DefaultSLOQuantile); got != 0 {
		t.Errorf("SLO below a batch of one: %.1f req/s, want 0", got)
	}
}
