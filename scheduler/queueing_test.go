package scheduler

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// Issue 12's example: resnet50 at a steady 200 req/s on one 20 % replica
// rated 250 req/s at full batches. Rate x 1.2 headroom (240) is under
// 250, so the autoscaler kept it, 99.9 % busy and missing 8 % of its
// SLO. At the SLO's p99 the replica carries far less: the autoscaler must
// add replicas (seen failing before the queueing capacity: no change).
func TestAutoscaleTargetsQueueingCapacity(t *testing.T) {
	c := SliceConfig{SMPercent: 20, Batch: 8, Throughput: 250}
	slo := 70 * time.Millisecond
	policy := ScalePolicy{Min: 1, Max: 20}
	tests := []struct {
		name     string
		rate     float64
		replicas []ReplicaCapacity
		wantMore bool
		wantLess bool
	}{
		{"busy replica at 200 req/s scales up", 200, replicas(c), true, false},
		{"light load keeps one", 20, replicas(c), false, false},
		{"two replicas for the load of one are cut after the cool-down", 20, replicas(c, c), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Autoscale(AutoscaleInput{Now: t0.Add(time.Hour), Rate: tt.rate, Policy: policy, Replicas: tt.replicas, Configs: []SliceConfig{c}, SLO: slo}, DefaultAutoscaleOptions)
			if got := len(d.Add) > 0; got != tt.wantMore {
				t.Errorf("added %d (%s), want additions %v", len(d.Add), d.Reason, tt.wantMore)
			}
			if got := len(d.Remove) > 0; got != tt.wantLess {
				t.Errorf("removed %d (%s), want removals %v", len(d.Remove), d.Reason, tt.wantLess)
			}
			if tt.wantMore {
				total := 0.0
				for _, r := range tt.replicas {
					total += QueueCapacity(r.Config, slo, DefaultSLOQuantile)
				}
				for _, a := range d.Add {
					total += QueueCapacity(a, slo, DefaultSLOQuantile)
				}
				if total < tt.rate {
					t.Errorf("capacity after the decision %.1f req/s is below the rate %.1f", total, tt.rate)
				}
			}
		})
	}
}

func TestQueueCapacity(t *testing.T) {
	b1 := SliceConfig{SMPercent: 100, Batch: 1, Throughput: 100} // 10 ms
	b8 := SliceConfig{SMPercent: 50, Batch: 8, Throughput: 200}  // 40 ms
	tests := []struct {
		name   string
		c      SliceConfig
		slo    time.Duration
		lo, hi float64
	}{
		{"no room for a running batch", b8, 70 * time.Millisecond, 0, 0},
		{"a loose SLO nears full batches", b1, 10 * time.Second, 99, 100},
		{"a tight SLO carries a fraction", b1, 30 * time.Millisecond, 1, 60},
		{"no SLO is the throughput", b8, 0, 200, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := QueueCapacity(tt.c, tt.slo, DefaultSLOQuantile)
			if got < tt.lo || got > tt.hi {
				t.Errorf("QueueCapacity = %.2f, want in [%v, %v]", got, tt.lo, tt.hi)
			}
			if tt.slo > 0 && got > 0 {
				// The model's own p99 at its capacity is the SLO.
				if p := PredictResponse(tt.c, got*0.999999, DefaultSLOQuantile); p > tt.slo+tt.slo/100 || (got < tt.c.Throughput-1e-6 && p < tt.slo-tt.slo/100) {
					t.Errorf("PredictResponse at capacity = %s, want the SLO %s", p, tt.slo)
				}
			}
		})
	}
}

func TestRateEstimatorRising(t *testing.T) {
	tests := []struct {
		name   string
		last   uint64 // requests in the last second, after 2 min at 100 req/s
		rising bool
	}{
		{"steady 100 req/s, within noise", 115, false},
		{"step 100 -> 200 req/s", 200, true},
		{"fall", 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := RateEstimator{HalfLife: 10 * time.Second}
			for i := range 121 {
				e.Observe(uint64(i)*100, t0.Add(time.Duration(i)*time.Second))
			}
			e.Observe(120*100+tt.last, t0.Add(121*time.Second))
			if got := e.Rising() > e.Rate()+1e-9; got != tt.rising {
				t.Errorf("Rising %.1f vs smoothed %.1f: rising %v, want %v", e.Rising(), e.Rate(), got, tt.rising)
			}
		})
	}
}

// At a steady rate, noise must pass for a rise no more often than
// risingFalseAlarm a second at any rate and over any interval: the
// 3-deviation normal rule let a light function's Poisson counts through
// about once in 270-370 intervals, and eight light functions then added a
// replica every half a minute; and a Rise pass every 250 ms
// (lifecycle.Core.Rise) looks four times a second, so its intervals must
// pass a quarter as often. The probability is summed exactly over the
// counts an interval may bring.
func TestRateEstimatorRisingFalseAlarms(t *testing.T) {
	for _, dt := range []time.Duration{time.Second, 250 * time.Millisecond} {
		for _, rate := range []float64{1, 3, 10, 30, 100, 1000} {
			t.Run(fmt.Sprintf("%g req/s over %s", rate, dt), func(t *testing.T) {
				warm := func() RateEstimator {
					e := RateEstimator{HalfLife: 10 * time.Second}
					for i := range 301 {
						e.Observe(uint64(float64(i)*rate), t0.Add(time.Duration(i)*time.Second))
					}
					return e
				}
				base := uint64(300 * rate)
				mu := rate * dt.Seconds()
				// P(n) by the recurrence P(n) = P(n-1) * mu / n, in logs
				// so that 1000 req/s does not underflow exp(-mu).
				logP, alarms, firstAlarm := -mu, 0.0, -1
				for n := 0; n < int(mu+30*math.Sqrt(mu)+30); n++ {
					if n > 0 {
						logP += math.Log(mu / float64(n))
					}
					e := warm()
					e.Observe(base+uint64(n), t0.Add(300*time.Second+dt))
					if e.Rising() > e.Rate()+1e-9 {
						alarms += math.Exp(logP)
						if firstAlarm < 0 {
							firstAlarm = n
						}
					}
				}
				if want := risingFalseAlarm * dt.Seconds(); alarms > want {
					t.Errorf("noise passes for a rise with probability %.5f (from %d requests in %s), want at most %.5f",
						alarms, firstAlarm, dt, want)
				}
				// And a tripling (and a few) is a rise.
				e := warm()
				e.Observe(base+uint64(3*mu)+7, t0.Add(300*time.Second+dt))
				if e.Rising() <= e.Rate()+1e-9 {
					t.Errorf("%g requests in %s after a steady %g req/s: not a rise", 3*mu+7, dt, rate)
				}
			})
		}
	}
}

// RisingLow plans a rise for its rate less a deviation of its count: at
// a steady rate the smoothed rate, after a step within the step's rate
// and never above what the interval counted.
func TestRateEstimatorRisingLow(t *testing.T) {
	tests := []struct {
		name   string
		last   uint64 // requests in the last 250 ms, after 2 min at 100 req/s
		lo, hi float64
	}{
		{"steady 100 req/s", 25, 99, 101},
		{"step to 300 req/s", 75, 200, 300},
		{"step to 1000 req/s", 250, 800, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := RateEstimator{HalfLife: 10 * time.Second}
			for i := range 121 {
				e.Observe(uint64(i)*100, t0.Add(time.Duration(i)*time.Second))
			}
			e.Observe(120*100+tt.last, t0.Add(120*time.Second+250*time.Millisecond))
			if got := e.RisingLow(); got < tt.lo || got > tt.hi || got > e.Rising()+1e-9 {
				t.Errorf("RisingLow %.1f (Rising %.1f, smoothed %.1f), want in [%v, %v]", got, e.Rising(), e.Rate(), tt.lo, tt.hi)
			}
		})
	}
}

// Replicas share the function's queue (pull dispatch), so a pool serves
// more at the SLO than its replicas apart. At a tight SLO, where a lone
// replica holds it only for requests that find it idle, the autoscaler
// planned with the sum of QueueCapacity and placed several times the
// replicas needed (h05-mix10-slo2 cost x6.6 the bound); seen failing
// before the pooled view (the autoscaler added 56 replicas where 10 do).
func TestPoolCapacityAndAutoscaleAtTightSLO(t *testing.T) {
	// resnet34-like: 20 % SM, batch 2 in 14.5 ms, SLO 29 ms.
	c := SliceConfig{SMPercent: 20, Batch: 2, Throughput: 138}
	slo := 29 * time.Millisecond
	lone := QueueCapacity(c, slo, DefaultSLOQuantile)
	tests := []struct {
		name           string
		n              int
		loRatio        float64 // PoolCapacity / (n x lone) at least
		maxOfFullBatch float64 // PoolCapacity / (n x Throughput) at most
	}{
		{"one replica is its own queue", 1, 1, 1},
		{"ten share a queue", 10, 3, 0.6},
		{"forty share a queue", 40, 5, 0.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := plus(nil, c, tt.n)
			got := PoolCapacity(cs, slo, DefaultSLOQuantile)
			if got < tt.loRatio*float64(tt.n)*lone-1e-6 {
				t.Errorf("PoolCapacity(%d) = %.1f, want at least %.1f x their %.1f apart", tt.n, got, tt.loRatio, float64(tt.n)*lone)
			}
			if got > tt.maxOfFullBatch*float64(tt.n)*c.Throughput+1e-6 {
				t.Errorf("PoolCapacity(%d) = %.1f above %.0f %% of their full-batch throughput", tt.n, got, 100*tt.maxOfFullBatch)
			}
			// The autoscaler, from nothing, adds a pool that serves this rate.
			d := Autoscale(AutoscaleInput{Now: t0, Rate: got, Policy: ScalePolicy{Min: 1, Max: 200}, Configs: []SliceConfig{c}, SLO: slo}, DefaultAutoscaleOptions)
			if len(d.Add) > tt.n {
				t.Errorf("at %.1f req/s the autoscaler adds %d replicas, want at most %d (%s)", got, len(d.Add), tt.n, d.Reason)
			}
			if PoolCapacity(d.Add, slo, DefaultSLOQuantile) < got*(1-1e-6) {
				t.Errorf("the %d replicas added serve %.1f req/s, below the rate %.1f", len(d.Add), PoolCapacity(d.Add, slo, DefaultSLOQuantile), got)
			}
		})
	}
}

// A partial batch measured slower than the full one bounds the wait for a
// running batch: the model times both by the slowest (mobilenet_v3_large
// at 20 % SM, batch 1 in 14.5 ms, batch 8 in 10.2 ms, missed 7.6 % of a
// 21-ms SLO when timed by the full batch).
func TestQueueCapacityTimesTheSlowestBatch(t *testing.T) {
	full := SliceConfig{SMPercent: 20, Batch: 8, Throughput: 8 / 0.0102}
	slow := full
	slow.SlowestMs = 14.5
	slo := 21 * time.Millisecond
	tests := []struct {
		name string
		c    SliceConfig
		zero bool
	}{
		{"full batch only: room for a running batch", full, false},
		{"a slower partial batch: none", slow, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := QueueCapacity(tt.c, slo, DefaultSLOQuantile)
			if (got == 0) != tt.zero {
				t.Errorf("QueueCapacity = %.1f, want zero %v", got, tt.zero)
			}
		})
	}
}

// A new function's rate is what it has been asked so far, not an average
// that starts at 0 and takes half-lives to climb: from 0 the smoothed
// rate of a steady 10 req/s was 2 after 3 s, so every ordinary count
// passed for a rise (Rising then plans for the raw count, 13-17 where 10
// is asked) and light functions were given a second replica each in their
// first seconds (the consolidation run used 2 GPUs for its first 2.5 min).
func TestRateEstimatorNewFunction(t *testing.T) {
	counts := []uint64{10, 13, 8, 11, 14, 9, 12, 10, 7, 13} // about 10 req/s, Poisson-like
	e := RateEstimator{HalfLife: 10 * time.Second}
	e.Observe(0, t0)
	total := uint64(0)
	for i, n := range counts {
		total += n
		r := e.Observe(total, t0.Add(time.Duration(i+1)*time.Second))
		if i >= 2 && math.Abs(r-10) > 2 {
			t.Errorf("after %d s of about 10 req/s the rate is %.2f, want 10 +- 2", i+1, r)
		}
		if i >= 1 && e.Rising() > e.Rate()+1e-9 {
			t.Errorf("after %d s: %d requests in a second at about 10 req/s passed for a rise (rate %.2f)", i+1, n, e.Rate())
		}
	}
	// Its first second is all it knows: the rate is that second's.
	first := RateEstimator{HalfLife: 10 * time.Second}
	first.Observe(0, t0)
	if r := first.Observe(10, t0.Add(time.Second)); math.Abs(r-10) > 1e-9 {
		t.Errorf("after its first second of 10 requests the rate is %.2f, want 10", r)
	}
}

// A scale-up for a rise brings warm replicas back before it adds new
// ones, whatever their slice: they serve at once, a new one after its
// start and load. Before, only a warm replica of the very slice the plan
// chose came back, so a burst after a scale-down to smaller slices waited
// for cold starts beside idle warm replicas (h10-bursts20s: 197 of a
// burst's first 5 s requests missed, 153 with warm replicas back). A
// scale-up for a slow climb or a backlog alone does not: it has the time
// to start right-sized replicas, and small warm slices brought back there
// cost the cost run's alexnet 1.27 % violations instead of 0.30 %.
func TestAutoscaleBringsWarmBackForARise(t *testing.T) {
	small := SliceConfig{SMPercent: 10, Batch: 4, Throughput: 200}
	large := SliceConfig{SMPercent: 40, Batch: 4, Throughput: 800}
	slo := 70 * time.Millisecond
	policy := ScalePolicy{Min: 1, Max: 20}
	warm := func(ids ...string) []ReplicaCapacity {
		var out []ReplicaCapacity
		for _, id := range ids {
			out = append(out, ReplicaCapacity{ID: id, Config: small})
		}
		return out
	}
	capSmall := QueueCapacity(small, slo, DefaultSLOQuantile)
	tests := []struct {
		name         string
		rate, rising float64
		warm         []ReplicaCapacity
		wantPromote  int
		wantAdd      bool
	}{
		{"covered: nothing comes back", 0.5 * capSmall, 0.5 * capSmall, warm("w1", "w2"), 0, false},
		{"a small rise: one warm back, nothing new", 0.5 * capSmall, 1.5 * capSmall, warm("w1", "w2"), 1, false},
		{"a burst: every warm back, and new ones for the rest", 0.5 * capSmall, 8 * capSmall, warm("w1", "w2"), 2, true},
		{"a burst, no warm: new ones", 0.5 * capSmall, 8 * capSmall, nil, 0, true},
		{"a slow climb: new ones, warm left", 8 * capSmall, 0, warm("w1", "w2"), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := AutoscaleInput{Now: t0.Add(time.Hour), Rate: tt.rate, Rising: tt.rising, Policy: policy, Replicas: replicas(small),
				Warm: tt.warm, Configs: []SliceConfig{small, large}, SLO: slo}
			d := Autoscale(in, DefaultAutoscaleOptions)
			if len(d.Promote) != tt.wantPromote {
				t.Errorf("brought back %v (%s), want %d", d.Promote, d.Reason, tt.wantPromote)
			}
			if got := len(d.Add) > 0; got != tt.wantAdd {
				t.Errorf("added %v (%s), want additions %v", d.Add, d.Reason, tt.wantAdd)
			}
			live := []SliceConfig{small}
			for range d.Promote {
				live = append(live, small)
			}
			live = append(live, d.Add...)
			if demand := max(tt.rate, tt.rising); !poolServes(live, demand, slo, DefaultSLOQuantile) {
				t.Errorf("after the decision the pool %v does not serve %.0f req/s", live, demand)
			}
		})
	}
}

// The one-at-a-time view times a pool's queue by the longest a replica
// spends per request in any batch it runs: batch 1's latency where
// batching pays, a step over the fewest requests that run at it where a
// partial batch is slow, and the slowest batch where nothing is timed.
func TestPerRequest(t *testing.T) {
	tests := []struct {
		name string
		c    SliceConfig
		want float64 // seconds
	}{
		{"untimed: one request a slowest batch", SliceConfig{Batch: 4, Throughput: 100}, 0.04},
		{"batching pays: batch 1", SliceConfig{Batch: 4, Throughput: 100, Steps: BatchSteps{{1, 20}, {2, 30}, {4, 40}}}, 0.02},
		{"a batch of 3 at batch 4's latency", SliceConfig{Batch: 4, Throughput: 50, Steps: BatchSteps{{1, 20}, {2, 30}, {4, 80}}}, 0.08 / 3},
		{"slow partial batch: never above the slowest", SliceConfig{Batch: 8, Throughput: 800, SlowestMs: 14.5, Steps: BatchSteps{{1, 14.5}, {2, 12}, {4, 11}, {8, 10}}}, 0.0145},
		{"steps past the batch are not run", SliceConfig{Batch: 2, Throughput: 2 / 0.03, Steps: BatchSteps{{1, 20}, {2, 30}, {4, 200}}}, 0.02},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.perRequest(); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("perRequest() = %.6f s, want %.6f s", got, tt.want)
			}
		})
	}
}

// densenet169At61 is family12's v15 case: densenet169 planned at 61 ms,
// a 40 % slice a pool can time and a 5 % one it cannot (52 ms a request,
// 64.5 ms crowded).
func densenet169At61() (slo time.Duration, fast, slow SliceConfig) {
	return 61 * time.Millisecond,
		SliceConfig{SMPercent: 40, Batch: 1, Throughput: 28.1, SlowestMs: 35.6},
		SliceConfig{SMPercent: 5, Batch: 1, Throughput: 19.2, SlowestMs: 52.1}
}

// A replica too slow to be timed in the pool (its crowded batch after a
// wait passes the SLO) serves what it holds apart and leaves the others'
// pool as it was: both pooled views time a pool by its slowest replica,
// and valued whole, family12's v15 read densenet169's 25 replicas at a
// 61-ms planning SLO (20 of 5 %, 52 ms a batch) as 3.6 req/s against
// 179, and one tick asked for 175 more.
func TestSlowReplicaDoesNotSinkItsPool(t *testing.T) {
	slo, fast, slow := densenet169At61()
	if _, s := splitPoolable([]SliceConfig{fast, slow}, slo); len(s) != 1 || s[0] != slow {
		t.Fatalf("splitPoolable: slow %v, want only the 5 %% slice", s)
	}
	apart := QueueCapacity(slow, slo, DefaultSLOQuantile)
	if apart <= 0 {
		t.Fatalf("the 5 %% slice carries nothing at %s: not a case the menu offers", slo)
	}
	fastPool := plus(nil, fast, 10)
	alone := PoolCapacity(fastPool, slo, DefaultSLOQuantile)
	tests := []struct {
		name   string
		pool   []SliceConfig
		lo, hi float64 // PoolCapacity within
	}{
		{"ten fast", fastPool, alone, alone},
		{"ten fast and a slow one", append(plus(nil, slow, 1), fastPool...), alone, alone + apart},
		{"ten fast and twenty slow", append(plus(nil, slow, 20), fastPool...), alone, alone + 20*apart},
		{"twenty slow: what they hold apart", plus(nil, slow, 20), 0, 20 * apart},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PoolCapacity(tt.pool, slo, DefaultSLOQuantile)
			if got < tt.lo*(1-1e-6) || got > tt.hi*(1+1e-6)+1e-9 {
				t.Errorf("PoolCapacity = %.2f req/s, want within [%.2f, %.2f]", got, tt.lo, tt.hi)
			}
		})
	}

	// The autoscaler adds to twenty slow replicas no more than it would
	// start from nothing for the same rate.
	rate := 0.9 * alone
	menu := []SliceConfig{slow, fast}
	fromZero := PlanFromZero(menu, rate, slo, DefaultSLOQuantile, 0, 1, 200)
	var live []ReplicaCapacity
	for i := range 20 {
		live = append(live, ReplicaCapacity{ID: fmt.Sprintf("s%d", i), Config: slow})
	}
	d := Autoscale(AutoscaleInput{Now: t0.Add(time.Hour), Rate: rate, Policy: ScalePolicy{Min: 1, Max: 200}, Replicas: live, Configs: menu, SLO: slo}, DefaultAutoscaleOptions)
	if len(d.Add) > len(fromZero) {
		t.Errorf("at %.1f req/s the autoscaler adds %d replicas to twenty slow ones, want at most the %d it starts from nothing (%s)", rate, len(d.Add), len(fromZero), d.Reason)
	}
	pool := slices.Clone(d.Add)
	for range 20 {
		pool = append(pool, slow)
	}
	if !poolServes(pool, rate, slo, DefaultSLOQuantile) {
		t.Errorf("after adding %d replicas the pool does not serve %.1f req/s", len(d.Add), rate)
	}
}

// A replica that joins a pool of more than one gets a slice the pool can
// time, where the menu holds one: the cheapest slice that carries any
// load may be too slow to share the function's queue (densenet169 at
// 61 ms: 5 %, 0.18 req/s), and a pool of them holds its model's memory
// many times for nothing. A lone replica is its own queue and may take
// any: at light load a slice whose full batch is too slow to pool serves
// by its partial batches (the consolidation run, one GPU).
func TestPoolsTakeSlicesThatPool(t *testing.T) {
	slo, fast, slow := densenet169At61()
	menu := []SliceConfig{slow, fast}
	sz := newSizer(slo, DefaultSLOQuantile, 0)
	lone := QueueCapacity(slow, slo, DefaultSLOQuantile)
	tests := []struct {
		name     string
		live     []SliceConfig
		demand   float64
		wantSlow bool // a slow slice among the adds
	}{
		{"a lone replica: the cheapest that serves", nil, 0.5 * lone, true},
		{"a pool from nothing: poolable slices", nil, 50, false},
		{"added to a replica: poolable slices", []SliceConfig{fast}, 0.9 * PoolCapacity(plus(nil, fast, 3), slo, DefaultSLOQuantile), false},
		{"a last copy that tops up a pool: poolable", plus(nil, fast, 2), PoolCapacity(plus(nil, fast, 2), slo, DefaultSLOQuantile) + 0.5*lone, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			add := fill(menu, tt.live, tt.demand, 50, mostEfficient(menu, sz.capOf, sz.cost), sz)
			if len(add) == 0 {
				t.Fatalf("fill added nothing for %.2f req/s", tt.demand)
			}
			if got := slices.Contains(add, slow); got != tt.wantSlow {
				t.Errorf("fill at %.2f req/s on %d replicas added %d replicas, a 5 %% one among them %v, want %v", tt.demand, len(tt.live), len(add), got, tt.wantSlow)
			}
			if !sz.serves(append(slices.Clone(tt.live), add...), tt.demand) {
				t.Errorf("the pool after fill does not serve %.2f req/s", tt.demand)
			}
		})
	}
	if got, ok := SmallestSlice(menu, slo, DefaultSLOQuantile, 0); !ok || got != slow {
		t.Errorf("SmallestSlice = %d %%, want the 5 %% slice: a replica before its load is known is alone", got.SMPercent)
	}
}
