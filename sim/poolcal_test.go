package sim

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// The pooled capacity model (scheduler.PoolCapacity) against the
// simulator's own answer: the largest Poisson rate a pool of n pinned
// replicas (min = max = n) holds within 1 % SLO violations, found by
// bisection. A pool is pinned to one slice by its profile: the measured
// points of one model at SM shares from sm up and batches up to maxBatch
// (the autoscaler's menu then starts at sm, the cheapest, and a batch of
// k still runs at its own measured latency); the slice the autoscaler
// gives the pool is read back from the replicas that served.

// poolCase is one pool to calibrate.
type poolCase struct {
	model    string // a model of the measured table; "synth": the synthetic model
	sm       int
	maxBatch int
	n        int
	slo      time.Duration
}

func (c poolCase) String() string {
	return fmt.Sprintf("%s@%d%%/b≤%d n=%d slo=%s", c.model, c.sm, c.maxBatch, c.n, c.slo)
}

// synthPool is the synthetic model of TestQueueModelAgainstSimulatedWaits.
var synthPool = synthModel{name: "synth", lat: map[int]float64{1: 10, 2: 13, 4: 18, 8: 28}, memory: 1536 << 20, size: 128 << 20, load: time.Second}

// pinnedCatalog is base (a real profile, or nil for the synthetic model)
// cut to SM shares from sm up, batches up to maxBatch, full quota.
func pinnedCatalog(t testing.TB, base *profiles.Profile, sm, maxBatch int) *Catalog {
	t.Helper()
	if base == nil {
		base, _, _ = synthCatalog(t, synthPool).Store.Lookup(synthPool.name, gpu.V100Product)
	}
	p := profiles.Profile{Model: base.Model, GPU: base.GPU, MemoryBytes: base.MemoryBytes, ModelSizeBytes: base.ModelSizeBytes, LoadTime: base.LoadTime}
	for _, pt := range base.Points {
		if pt.Quota == profiles.FullQuota && pt.SM >= sm && pt.Batch <= maxBatch {
			p.Points = append(p.Points, pt)
		}
	}
	s := profiles.NewStore()
	if err := s.Add(p); err != nil {
		t.Fatal(err)
	}
	return &Catalog{Store: s, Source: "pinned " + base.Model}
}

// poolRun is one simulated run of a pinned pool.
type poolRun struct {
	violations float64
	configs    []scheduler.SliceConfig // the slices that served, one per replica
}

// runPool simulates case c at rate with contention (nil: off).
func runPool(t testing.TB, cat *Catalog, c poolCase, rate float64, contention *Contention, seed uint64) poolRun {
	t.Helper()
	// At least 20000 requests measured, so that 1 % is 200 of them.
	d := time.Duration(max(90, min(1200, 20000/rate)) * float64(time.Second))
	const warmup = 20 * time.Second
	g := Generator{Name: "pool", Functions: []Function{{Name: "f", Model: c.model, SLO: c.slo, Min: c.n, Max: c.n}},
		Shape: Constant(rate), Poisson: true, Duration: warmup + d, Seed: seed}
	wl, err := g.Workload()
	if err != nil {
		t.Fatal(err)
	}
	gpus := (c.n*c.sm+99)/100 + 1
	// In arrival order, the discipline the queueing models assume: with
	// late requests last a pool holds more than they plan (at 1.25-1.3x
	// a model, 0.26-0.75 % missed in three of the pinned cases, against
	// 1.57-4.86 % in arrival order), slack the models do not count.
	e, err := newEngine("faas-gpu", wl, cluster(t, gpus, gpus), cat, Options{Warmup: warmup, Contention: contention, ArrivalOrder: true})
	if err != nil {
		t.Fatal(err)
	}
	if e.pol, err = newPolicy("faas-gpu"); err != nil {
		t.Fatal(err)
	}
	byID := map[string]scheduler.SliceConfig{}
	e.onDone = func(n int32, r *replica, at time.Duration) {
		if wl.Arrivals[n].At >= warmup {
			byID[r.id] = r.cfg
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	var run poolRun
	run.violations = e.met.result(e).SLOViolations
	for _, cfg := range byID {
		run.configs = append(run.configs, cfg)
	}
	slices.SortFunc(run.configs, func(a, b scheduler.SliceConfig) int { return a.Batch - b.Batch })
	return run
}

// bisectPool is the largest rate (within 2 %) at which case c holds the
// SLO for 99 % of its requests in the simulator, and the slices the pool
// served with there.
func bisectPool(t testing.TB, cat *Catalog, c poolCase, contention *Contention, hi float64) (float64, []scheduler.SliceConfig) {
	t.Helper()
	lo := 0.0
	var at []scheduler.SliceConfig
	for hi-lo > 0.02*hi {
		mid := (lo + hi) / 2
		r := runPool(t, cat, c, mid, contention, 7)
		if r.violations <= 1 {
			lo, at = mid, r.configs
		} else {
			hi = mid
		}
	}
	return lo, at
}

// calibrationModels are the measured models the calibration uses.
var calibrationModels = []string{"resnet50", "resnet152", "convnext_base", "alexnet",
	"mobilenet_v3_large", "shufflenet_v2_x1_0", "resnet34", "efficientnet_b2", "vgg19_bn", "convnext_large"}

// calibrationCases are the pools measured: real slices of four models
// and the synthetic model, at a tight SLO (2.5x the slice's batch-1
// latency) and a loose one (6x), alone and in pools of 2, 4 and 10; and
// a lone replica and a pair of six more models of the suite's mix10,
// light to heavy, at the tight SLO, where the lone-replica model was
// furthest below the simulator.
func calibrationCases(t testing.TB, store *profiles.Store) []poolCase {
	t.Helper()
	type slice struct {
		model     string
		sm, batch int
		small     bool // n = 1 and 2 at the tight SLO only
	}
	var out []poolCase
	for _, s := range []slice{{"resnet50", 20, 8, false}, {"resnet152", 20, 8, false}, {"convnext_base", 30, 8, false}, {"alexnet", 10, 8, false}, {"synth", 5, 8, false},
		{"mobilenet_v3_large", 20, 8, true}, {"shufflenet_v2_x1_0", 10, 8, true}, {"resnet34", 20, 8, true}, {"efficientnet_b2", 20, 8, true}, {"vgg19_bn", 30, 8, true}, {"convnext_large", 30, 8, true}} {
		l1 := 10.0 // synth: 10 ms at batch 1
		if s.model != "synth" {
			p, _, ok := store.Lookup(s.model, gpu.V100Product)
			if !ok {
				t.Fatalf("no profile of %s", s.model)
			}
			var err error
			if l1, err = scheduler.LatencyAt(p, 1, float64(s.sm)); err != nil {
				t.Fatal(err)
			}
		}
		factors, ns := []float64{2.5, 6}, []int{1, 2, 4, 10}
		if s.small {
			factors, ns = []float64{2.5}, []int{1, 2}
		}
		for _, f := range factors {
			slo := time.Duration(f * l1 * float64(time.Millisecond)).Round(time.Millisecond)
			for _, n := range ns {
				out = append(out, poolCase{model: s.model, sm: s.sm, maxBatch: s.batch, n: n, slo: slo})
			}
		}
	}
	return out
}

// TestPoolCalibration prints, for every calibration case, contention on
// and off, the bisected true capacity beside PoolCapacity's for the
// slices the pool served with, their ratio, and the violations with the
// pool run at the model's capacity; then the sample path's capacity
// (PoolPathCapacity, for copies of one slice), the truth over the better
// of the two, and the violations at that better one. It takes minutes, so it
// runs only with FAASGPU_POOL_CALIBRATION=1 (docs/evaluation.md, "Pooled
// capacity against the simulator").
func TestPoolCalibration(t *testing.T) {
	if os.Getenv("FAASGPU_POOL_CALIBRATION") == "" {
		t.Skip("set FAASGPU_POOL_CALIBRATION=1 to run the calibration (minutes)")
	}
	path := FindTable(".")
	if path == "" {
		t.Skip("no measured table (" + TableName + ")")
	}
	real, err := LoadTable(path, calibrationModels)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| case | slice | contention | true req/s | model req/s | true/model | violations at model %% | sample path req/s | true/best | violations at best %% |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range calibrationCases(t, real.Store) {
		var base *profiles.Profile
		if c.model != "synth" {
			base, _, _ = real.Store.Lookup(c.model, gpu.V100Product)
		}
		cat := pinnedCatalog(t, base, c.sm, c.maxBatch)
		p, _, _ := cat.Store.Lookup(c.model, gpu.V100Product)
		hi := 0.0
		for _, cfg := range scheduler.ConfigsWithin(p, 0, 0) {
			hi = max(hi, float64(c.n)*cfg.Throughput)
		}
		for _, con := range []*Contention{DefaultContention(), nil} {
			truth, cfgs := bisectPool(t, cat, c, con, hi)
			model, atModel, path, atBest := math.NaN(), math.NaN(), math.NaN(), math.NaN()
			slice := "-"
			if len(cfgs) > 0 {
				model = scheduler.PoolCapacity(cfgs, c.slo, scheduler.DefaultSLOQuantile)
				slice = fmt.Sprintf("%d%%/b%d..b%d x%d", cfgs[0].SMPercent, cfgs[0].Batch, cfgs[len(cfgs)-1].Batch, len(cfgs))
				atModel = runPool(t, cat, c, model, con, 7).violations
				if cfgs[0] == cfgs[len(cfgs)-1] { // the path times copies of one slice
					path = scheduler.PoolPathCapacity(cfgs[0], len(cfgs), c.slo, scheduler.DefaultSLOQuantile)
					atBest = atModel
					if path > model {
						atBest = runPool(t, cat, c, path, con, 7).violations
					}
				}
			}
			on := "off"
			if con != nil {
				on = "on"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f |\n", c, slice, on, truth, model, truth/model, atModel, path, truth/max(model, path), atBest)
		}
	}
	t.Log("\n" + b.String())
}

// The pooled model must be tight as well as safe: for pools where the
// model before the batched view planned 1.3-2x below what the simulator
// holds, or above it (docs/evaluation.md, "Pooled capacity against the
// simulator"), the pool pinned at PoolCapacity holds the SLO for 99 % of
// requests, and at 1.25x it no longer does (contention on). The
// synthetic case runs without the measured table.
func TestPoolModelIsTight(t *testing.T) {
	const over = 1.25
	tests := []struct {
		c     poolCase
		batch int // the slice the autoscaler gives the pool (at c.sm)
	}{
		{poolCase{model: "synth", sm: 5, maxBatch: 8, n: 10, slo: 60 * time.Millisecond}, 4},
		{poolCase{model: "resnet50", sm: 20, maxBatch: 8, n: 10, slo: 50 * time.Millisecond}, 4},
		{poolCase{model: "convnext_base", sm: 30, maxBatch: 8, n: 10, slo: 105 * time.Millisecond}, 2},
		// At a tight SLO a pool of batch-2 slices: its queue timed at the
		// slowest batch for every request, the model rated it x1.80 below
		// what it holds.
		{poolCase{model: "convnext_base", sm: 30, maxBatch: 8, n: 10, slo: 44 * time.Millisecond}, 2},
		// At a loose SLO the replicas' QueueCapacity summed as profiled
		// (2127 req/s) was past what the ten hold once their batches
		// slow each other: 100 % missed there.
		{poolCase{model: "resnet50", sm: 20, maxBatch: 8, n: 10, slo: 119 * time.Millisecond}, 8},
	}
	base := measuredBase("resnet50", "convnext_base")
	for _, tt := range tests {
		t.Run(tt.c.String(), func(t *testing.T) {
			pinnedIsTight(t, pinnedCatalog(t, base(t, tt.c.model), tt.c.sm, tt.c.maxBatch), tt.c, tt.batch, over, "PoolCapacity", func(pool []scheduler.SliceConfig) float64 {
				return scheduler.PoolCapacity(pool, tt.c.slo, scheduler.DefaultSLOQuantile)
			})
		})
	}
}

// A lone replica at a tight SLO (2.5x its slice's batch-1 latency), where
// the model that timed every batch at the slowest planned 2-18x below what
// the simulator holds (docs/evaluation.md, "A lone replica's partial
// batches"): pinned at QueueCapacity it holds the SLO for 99 % of
// requests, and at 1.3x it no longer does (contention on). The cases are
// the calibration's whose slice the pinning keeps under both models.
func TestLoneModelIsTight(t *testing.T) {
	const over = 1.3
	tests := []struct {
		c     poolCase
		batch int // the slice the autoscaler gives the replica (at c.sm)
	}{
		{poolCase{model: "mobilenet_v3_large", sm: 20, maxBatch: 8, n: 1, slo: 29 * time.Millisecond}, 8},
		{poolCase{model: "resnet152", sm: 20, maxBatch: 8, n: 1, slo: 67 * time.Millisecond}, 2},
		{poolCase{model: "alexnet", sm: 10, maxBatch: 8, n: 1, slo: 9 * time.Millisecond}, 2},
	}
	base := measuredBase("mobilenet_v3_large", "resnet152", "alexnet")
	for _, tt := range tests {
		t.Run(tt.c.String(), func(t *testing.T) {
			pinnedIsTight(t, pinnedCatalog(t, base(t, tt.c.model), tt.c.sm, tt.c.maxBatch), tt.c, tt.batch, over, "QueueCapacity", func(pool []scheduler.SliceConfig) float64 {
				return scheduler.QueueCapacity(pool[0], tt.c.slo, scheduler.DefaultSLOQuantile)
			})
		})
	}
}

// The sample-path view (scheduler.PoolPathCapacity: a small pool's shared
// queue with each batch timed at its own measured latency, crowded) is
// safe and tight where it rates a pool above the model: pinned at the
// better of the two, pools of two to four hold the SLO for 99 % of
// requests, and at 1.25x they no longer do (contention on). The model
// alone is loose on the three pools of four (at 1.25x its capacity
// 0.05-0.71 % missed) and at the edge on the pair (1.02 %).
// The synthetic case runs without the measured table.
func TestPoolPathIsTight(t *testing.T) {
	const over = 1.25
	tests := []struct {
		c     poolCase
		batch int // the slice the autoscaler gives the pool (at c.sm)
	}{
		{poolCase{model: "synth", sm: 5, maxBatch: 8, n: 4, slo: 60 * time.Millisecond}, 4},
		{poolCase{model: "convnext_base", sm: 30, maxBatch: 8, n: 4, slo: 44 * time.Millisecond}, 2},
		{poolCase{model: "resnet50", sm: 20, maxBatch: 8, n: 4, slo: 50 * time.Millisecond}, 4},
		{poolCase{model: "resnet152", sm: 20, maxBatch: 8, n: 2, slo: 161 * time.Millisecond}, 4},
	}
	base := measuredBase("convnext_base", "resnet50", "resnet152")
	for _, tt := range tests {
		t.Run(tt.c.String(), func(t *testing.T) {
			pinnedIsTight(t, pinnedCatalog(t, base(t, tt.c.model), tt.c.sm, tt.c.maxBatch), tt.c, tt.batch, over, "PoolPathCapacity", func(pool []scheduler.SliceConfig) float64 {
				model := scheduler.PoolCapacity(pool, tt.c.slo, scheduler.DefaultSLOQuantile)
				path := scheduler.PoolPathCapacity(pool[0], len(pool), tt.c.slo, scheduler.DefaultSLOQuantile)
				t.Logf("model %.1f req/s, sample path %.1f req/s", model, path)
				return max(model, path)
			})
		})
	}
}

// measuredBase gives the pinned cases' profiles: the measured table's
// for models, loaded once and only where a case needs it (a case is
// skipped without the table), and nil for "synth", pinnedCatalog's
// synthetic model.
func measuredBase(models ...string) func(t *testing.T, model string) *profiles.Profile {
	var real *Catalog
	return func(t *testing.T, model string) *profiles.Profile {
		t.Helper()
		if model == "synth" {
			return nil
		}
		if real == nil {
			path := FindTable(".")
			if path == "" {
				t.Skip("no measured table (" + TableName + ")")
			}
			var err error
			if real, err = LoadTable(path, models); err != nil {
				t.Fatal(err)
			}
		}
		p, _, _ := real.Store.Lookup(model, gpu.V100Product)
		return p
	}
}

// pinnedIsTight pins c's pool of the menu's (c.sm, batch) slice in cat,
// runs it at the model's capacity (capacity of the pool, named model) and
// at over times it, and fails where the first misses more than 1 % of
// the SLO (the model is not safe) or the second no more (it is loose).
func pinnedIsTight(t *testing.T, cat *Catalog, c poolCase, batch int, over float64, model string, capacity func([]scheduler.SliceConfig) float64) {
	t.Helper()
	p, _, _ := cat.Store.Lookup(c.model, gpu.V100Product)
	var cfg scheduler.SliceConfig
	for _, x := range scheduler.ConfigsFromProfile(p, c.slo, 0) { // the menu's entry, as the replicas get it
		if x.SMPercent == c.sm && x.Batch == batch {
			cfg = x
		}
	}
	pool := make([]scheduler.SliceConfig, c.n)
	for i := range pool {
		pool[i] = cfg
	}
	rate := capacity(pool)
	if rate <= 0 {
		t.Fatalf("%+v carries nothing at %s", cfg, c.slo)
	}
	at := runPool(t, cat, c, rate, DefaultContention(), 7)
	if !slices.Equal(at.configs, pool) {
		t.Fatalf("the pool served with %v, want %d x %+v: the pinning no longer holds", at.configs, c.n, cfg)
	}
	above := runPool(t, cat, c, over*rate, DefaultContention(), 7)
	t.Logf("%s %.1f req/s: %.2f %% violations; at x%.2f: %.2f %%", model, rate, at.violations, over, above.violations)
	if at.violations > 1 {
		t.Errorf("at the model's capacity %.1f req/s, %.2f %% miss the SLO: the model is not safe", rate, at.violations)
	}
	if above.violations <= 1 {
		t.Errorf("at x%.2f the model's capacity (%.1f req/s) only %.2f %% miss the SLO: the model leaves more than %.0f %% of the pool unplanned", over, over*rate, above.violations, 100*(over-1))
	}
}
