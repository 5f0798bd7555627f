package sim

import (
	"testing"
	"time"
)

// Consolidation in the simulator, through the lifecycle core as the
// provider runs it: eight light functions under a load that falls from
// 500 to 16 req/s after a minute, so that the replicas left after the
// scale-down spread over two GPUs while their slices fit on one. (From
// 300 req/s, since the lone-replica model counts partial batches, they
// fit on one GPU from the start: 388 GPU-s with consolidation and
// without, where they were 426 and 598 before.) (At a
// steady 16 req/s they once spread over GPUs a merge of replicas then
// freed; since the autoscaler values a function's replicas as a pool,
// issue 12, they stay as placed, and the steady load had nothing to
// consolidate.) With consolidation the second GPU is freed — its
// replicas' replacements start elsewhere, the old ones drain and go — so
// GPU-seconds fall, every request finishes, and the SLO holds.
func TestConsolidationFreesAGPU(t *testing.T) {
	path := FindTable(".")
	if path == "" {
		t.Skip("no " + TableName + " beside the repository")
	}
	ramp, err := ParseRamp("0s:500,60s:500,70s:16")
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec{Name: "consolidate", Models: []string{"mobilenet_v2*2", "resnet18*2", "densenet121*2", "vgg16*2"},
		Poisson: true, Ramp: ramp, Duration: 5 * time.Minute, Seed: 3, SLOFactor: 3.5, GPUs: 4, PerNode: 4,
		Options: Options{Warmup: 30 * time.Second}}
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
	opts := spec.Options
	if opts.Contention, err = spec.ContentionModel(); err != nil {
		t.Fatal(err)
	}
	for _, noWarm := range []bool{false, true} {
		run := func(noConsolidate bool) *Result {
			o := opts
			o.NoConsolidate, o.NoWarm = noConsolidate, noWarm
			r, err := RunPolicy(Config{Workload: wl, Inventory: inv, Catalog: cat, Options: o}, "faas-gpu")
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		// Without warm replicas a replaced replica is stopped at once,
		// requests in hand: it must drain them.
		off, on := run(true), run(false)
		t.Logf("no warm %v: without: %.0f GPU-s, %.2f %% violations; with: %.0f GPU-s, %.2f %% violations", noWarm, off.GPUSeconds, off.SLOViolations, on.GPUSeconds, on.SLOViolations)
		// With warm replicas the scale-down leaves them spread over two
		// GPUs and only consolidation frees one. Without them, since
		// resizes no longer open an idle GPU (Hints.Occupied), the
		// resizes alone pack the replicas onto one and consolidation has
		// nothing left to do: it must then cost nothing.
		if !noWarm && on.GPUSeconds >= off.GPUSeconds || noWarm && on.GPUSeconds > off.GPUSeconds {
			t.Errorf("no warm %v: consolidation used %.0f GPU-seconds, without it %.0f", noWarm, on.GPUSeconds, off.GPUSeconds)
		}
		if on.GPUsPeak > off.GPUsPeak {
			t.Errorf("no warm %v: consolidation peaked at %.0f GPUs, without it %.0f: a move must not need a GPU of its own", noWarm, on.GPUsPeak, off.GPUsPeak)
		}
		if on.Unfinished != 0 || on.Completed != on.Requests {
			t.Errorf("no warm %v: with consolidation %d of %d requests completed, %d unfinished", noWarm, on.Completed, on.Requests, on.Unfinished)
		}
		// Make before break costs no request its SLO; packing tighter may
		// add a little contention, a tenth of a point at most. A move
		// that broke first would make its function's requests wait out a
		// cold start.
		if on.SLOViolations > off.SLOViolations+0.1 {
			t.Errorf("no warm %v: with consolidation %.2f %% of requests missed their SLO, without it %.2f %%", noWarm, on.SLOViolations, off.SLOViolations)
		}
	}
}
