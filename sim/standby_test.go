package sim

import (
	"testing"
	"time"
)

// A 6x step on a function with memory to spare: with a standby, the rise
// promotes it and serves at once; without, the step waits out a start-up
// and a model load. The live test (test/e2e TestLiveSLOUnderStepAndBurst)
// drives the same step through the local provider.
func TestStandbyAnswersAStep(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := Generator{Functions: []Function{{Name: "rn", Model: "resnet50", SLO: 100 * time.Millisecond, Max: 20}},
		Shape:    Ramp{{0, 20}, {60 * time.Second, 20}, {60*time.Second + time.Millisecond, 120}, {90 * time.Second, 120}},
		Duration: 90 * time.Second, Poisson: true, Seed: 12}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	inv := cluster(t, 1, 1)
	opts := Options{ContainerStart: 2 * time.Second, Contention: DefaultContention()}
	with, _, e := simulate(t, "faas-gpu", wl, inv, cat, opts)
	opts.NoStandby = true
	without, _, _ := simulate(t, "faas-gpu", wl, inv, cat, opts)
	promoted := e.pol.(*faasGPU).promoted
	t.Logf("6x step: %.2f %% of requests over the SLO with a standby (%d promoted), %.2f %% without", with.SLOViolations, promoted, without.SLOViolations)
	if promoted == 0 || with.SLOViolations >= without.SLOViolations/2 {
		t.Fatalf("a standby (%d promoted) should at least halve the step's misses: %.2f %% with, %.2f %% without", promoted, with.SLOViolations, without.SLOViolations)
	}
}
