package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// The queueing model of scheduler.QueueCapacity against the simulator:
// one replica of a synthetic batched model (pinned by min = max = 1, so
// the autoscaler cannot hide the queue) under Poisson arrivals at a range
// of loads. The model's p99 must bound the simulated p99 (it is built
// from an upper bound), must not be so loose that it plans for much less
// than the replica serves, and at the model's own capacity for the SLO the
// replica must hold the SLO for 99 % of requests.
func TestQueueModelAgainstSimulatedWaits(t *testing.T) {
	const slo = 100 * time.Millisecond
	// The same latency at every SM %: the plan takes the most efficient
	// slice, 5 % SM at batch 8 (28 ms for 8: 285.7 req/s), whose 28 ms is
	// within SLO/2.
	model := synthModel{name: "synth", lat: map[int]float64{1: 10, 2: 13, 4: 18, 8: 28}, memory: 1536 << 20, size: 128 << 20, load: time.Second}
	cat := synthCatalog(t, model)
	cfg := scheduler.SliceConfig{SMPercent: 5, Batch: 8, Throughput: 8 / 0.028}
	capacity := scheduler.QueueCapacity(cfg, slo, scheduler.DefaultSLOQuantile)
	if capacity <= 0 || capacity >= cfg.Throughput {
		t.Fatalf("capacity %.1f req/s, want between 0 and the full-batch %.1f", capacity, cfg.Throughput)
	}
	tests := []struct {
		name string
		rate float64
	}{
		{"light", 0.2 * cfg.Throughput},
		{"half", 0.5 * cfg.Throughput},
		{"at the model's capacity", capacity},
		{"heavy", 0.9 * cfg.Throughput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := Generator{Name: "q", Functions: []Function{{Name: "synth", Model: "synth", SLO: slo, Min: 1, Max: 1}},
				Shape: Constant(tt.rate), Poisson: true, Duration: 10 * time.Minute, Seed: 7}
			wl, err := g.Workload()
			if err != nil {
				t.Fatal(err)
			}
			res, done, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{Warmup: 30 * time.Second})
			var lats []time.Duration
			for _, c := range done {
				if wl.Arrivals[c.n].At >= 30*time.Second {
					lats = append(lats, c.latency)
				}
			}
			slices.Sort(lats)
			p99 := lats[len(lats)*99/100]
			predicted := scheduler.PredictResponse(cfg, tt.rate, 0.99)
			t.Logf("rate %.1f: simulated p99 %s, predicted %s, violations %.2f %%", tt.rate, p99, predicted, res.SLOViolations)
			if predicted < p99 {
				t.Errorf("predicted p99 %s below the simulated %s: the bound does not hold", predicted, p99)
			}
			if predicted > 3*p99 {
				t.Errorf("predicted p99 %s over 3x the simulated %s: too loose to plan with", predicted, p99)
			}
			if tt.rate <= capacity && res.SLOViolations > 1 {
				t.Errorf("at %.1f req/s, within the model's capacity %.1f, %.2f %% miss the SLO", tt.rate, capacity, res.SLOViolations)
			}
		})
	}
}
