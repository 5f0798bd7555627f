package sim

import (
	"testing"
	"time"
)

// runScenario runs a published scenario, shortened by shrink, on the
// measured table beside the repository (skipped without it, as the
// profiles package's table tests are), with contention as published.
func runScenario(t *testing.T, name string, shrink func(*Spec)) map[string]*Result {
	t.Helper()
	path := FindTable(".")
	if path == "" {
		t.Skip("no " + TableName + " beside the repository")
	}
	spec, _, err := Scenario(name)
	if err != nil {
		t.Fatal(err)
	}
	shrink(&spec)
	models, err := spec.ProfileModels()
	if err != nil {
		t.Fatal(err)
	}
	cat, err := LoadTable(path, models)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := spec.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := spec.Workload(cat, inv.Devices()[0].Product)
	if err != nil {
		t.Fatal(err)
	}
	// As faas-gpu simulate runs it: with the spec's contention model (the
	// built-in one unless the scenario names another).
	opts := spec.Options
	if opts.Contention, err = spec.ContentionModel(); err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Workload: wl, Inventory: inv, Catalog: cat, Policies: spec.Policies, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Result{}
	for _, r := range res {
		out[r.Policy] = r
		if r.Events == 0 {
			t.Errorf("%s: no events", r.Policy)
		}
	}
	return out
}

// Short versions of the published runs: they must run, and go the way
// the papers say (docs/evaluation.md has the full runs and numbers).
func TestPublishedRunsShort(t *testing.T) {
	t.Run("consolidation", func(t *testing.T) {
		// FaST-GShare slide 18: spatio-temporal packing consolidates the
		// pods that time sharing spreads over all four GPUs.
		r := runScenario(t, "consolidation", func(s *Spec) { s.Duration, s.Options.Warmup = time.Minute, 10*time.Second })
		for _, p := range []string{"fast-gshare", "faas-gpu"} {
			if r[p].GPUsMean >= r["time-sharing"].GPUsMean {
				t.Errorf("%s used %.2f GPUs, time sharing %.2f", p, r[p].GPUsMean, r["time-sharing"].GPUsMean)
			}
		}
	})
	t.Run("throughput", func(t *testing.T) {
		// Slide 17: spatial sharing serves more than time sharing.
		r := runScenario(t, "throughput", func(s *Spec) {
			s.Rate, s.Duration, s.Options.Warmup = 2000, 30*time.Second, 15*time.Second
			s.Policies = []string{"time-sharing", "fast-gshare", "faas-gpu"}
		})
		for _, p := range []string{"fast-gshare", "faas-gpu"} {
			if r[p].Throughput <= r["time-sharing"].Throughput {
				t.Errorf("%s served %.1f req/s, time sharing %.1f", p, r[p].Throughput, r["time-sharing"].Throughput)
			}
		}
	})
	t.Run("locality", func(t *testing.T) {
		// The GPU-enabled FaaS paper: LALB and LALB+O3 cut LB's mean
		// latency and miss ratio.
		r := runScenario(t, "locality", func(s *Spec) {
			s.Duration, s.Options.Warmup = 5*time.Minute, time.Minute
			s.Policies = []string{"lb", "lalb", "lalb-o3", "faas-gpu"}
		})
		lb := r["lb"]
		for _, p := range []string{"lalb", "lalb-o3"} {
			if r[p].Mean >= lb.Mean || r[p].HitRatio <= lb.HitRatio {
				t.Errorf("%s: mean %.1f ms, hits %.1f %%; lb %.1f ms, %.1f %%", p, r[p].Mean, r[p].HitRatio, lb.Mean, lb.HitRatio)
			}
		}
	})
	t.Run("cost", func(t *testing.T) {
		r := runScenario(t, "cost", func(s *Spec) {
			s.Ramp = Ramp{{0, 50}, {time.Minute, 400}, {2 * time.Minute, 50}}
			s.Duration, s.GPUs = 2*time.Minute, 16
		})
		for p, res := range r {
			if res.Completed == 0 || res.GPUSeconds <= 0 {
				t.Errorf("%s: completed %d, %.0f GPU-s", p, res.Completed, res.GPUSeconds)
			}
		}
	})
	t.Run("scale", func(t *testing.T) {
		r := runScenario(t, "scale", func(s *Spec) { s.Functions, s.GPUs, s.Rate, s.Duration = 50, 40, 1000, 10*time.Second })
		if res := r["faas-gpu"]; res.Completed < res.Requests*9/10 {
			t.Errorf("completed %d of %d", res.Completed, res.Requests)
		}
	})
}
