package sim

import (
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// stepOnTwoGPUs is an 8x step, 50 to 400 req/s at 60 s, on a resnet50
// function of a node with two GPUs: the step opens the second.
func stepOnTwoGPUs(t *testing.T) (*Catalog, *Workload, gpu.Inventory) {
	t.Helper()
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := Generator{Functions: []Function{{Name: "rn", Model: "resnet50", SLO: 100 * time.Millisecond, Max: 20}},
		Shape:    Ramp{{0, 50}, {60 * time.Second, 50}, {60*time.Second + time.Millisecond, 400}, {120 * time.Second, 400}},
		Duration: 120 * time.Second, Poisson: true, Seed: 12}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	return cat, wl, cluster(t, 1, 2)
}

// An 8x step on a function whose container takes 20 s to start: with two
// processes parked, the step's new replicas take them and wait out only
// the handover and the model load; without, the whole container start.
func TestParkedProcessesAnswerAStep(t *testing.T) {
	cat, wl, inv := stepOnTwoGPUs(t)
	opts := Options{ContainerStart: 20 * time.Second, Contention: DefaultContention(), Warmup: 30 * time.Second, Parked: "0"}
	without, _, _ := simulate(t, "faas-gpu", wl, inv, cat, opts)
	opts.Parked = "2"
	with, _, e := simulate(t, "faas-gpu", wl, inv, cat, opts)
	p := e.pol.(*faasGPU)
	t.Logf("8x step, 20-s container start: %.2f %% of requests over the SLO with 2 parked (%d parked, %d taken), %.2f %% without",
		with.SLOViolations, p.parked, p.taken, without.SLOViolations)
	if p.taken == 0 || p.parked < p.taken+2 {
		t.Fatalf("%d processes parked and %d taken: want the pool refilled after each taken", p.parked, p.taken)
	}
	if with.SLOViolations >= without.SLOViolations/2 {
		t.Fatalf("parked processes should at least halve the step's misses: %.2f %% with, %.2f %% without", with.SLOViolations, without.SLOViolations)
	}
}

// Two 8x bursts on a function whose container takes 20 s to start: with
// "auto", the first burst's starts teach the function how many to keep
// parked, so the second finds them; one parked process, as auto keeps
// before any burst, leaves the second burst waiting for containers again.
func TestParkedAutoLearnsTheBursts(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	ms := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	wl, err := Generator{Functions: []Function{{Name: "rn", Model: "resnet50", SLO: 100 * time.Millisecond, Max: 20}},
		Shape: Ramp{{0, 50}, {ms(60), 50}, {ms(60.001), 400}, {ms(80), 400}, {ms(80.001), 50},
			{ms(150), 50}, {ms(150.001), 400}, {ms(170), 400}, {ms(170.001), 50}, {ms(240), 50}},
		Duration: 240 * time.Second, Poisson: true, Seed: 12}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	inv := cluster(t, 1, 2)
	// Warm replicas that outlive the gap would answer the second burst
	// without any start: they keep their memory 20 s here.
	opts := Options{ContainerStart: 20 * time.Second, Contention: DefaultContention(), Warmup: 30 * time.Second, WarmTTL: 20 * time.Second, Parked: "1"}
	one, _, _ := simulate(t, "faas-gpu", wl, inv, cat, opts)
	opts.Parked = "" // the default: auto
	auto, _, e := simulate(t, "faas-gpu", wl, inv, cat, opts)
	p := e.pol.(*faasGPU)
	t.Logf("two 8x bursts, 20-s container start: %.2f %% of requests over the SLO with auto (%d parked, %d taken), %.2f %% with one",
		auto.SLOViolations, p.parked, p.taken, one.SLOViolations)
	if auto.SLOViolations >= one.SLOViolations/2 {
		t.Fatalf("a learnt count should at least halve the misses of one parked: %.2f %% with auto, %.2f %% with one", auto.SLOViolations, one.SLOViolations)
	}
}

// -parked asks its count of every function: one whose maximum is lower
// keeps its maximum, as before the count was read as an annotation, and
// the run goes on instead of failing its deploy.
func TestParkedCountAboveAFunctionsMax(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	wl, err := Generator{Functions: []Function{{Name: "rn", Model: "resnet50", SLO: 100 * time.Millisecond, Max: 3}},
		Shape: Ramp{{0, 20}, {10 * time.Second, 20}}, Duration: 10 * time.Second, Poisson: true, Seed: 12}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	_, _, e := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{Parked: "50", Contention: DefaultContention()})
	if got := e.pol.(*faasGPU).core.ParkedTarget("openfaas-fn/rn"); got < 1 || got > 3 {
		t.Fatalf("a function of max 3 asked for 50 parked keeps %d, want 1 to 3", got)
	}
}

// As the Kubernetes backend parks (Options.ParkedHeldGPUs), a parked
// process sees only the GPUs its node held when it was parked: the 8x
// step of TestParkedProcessesAnswerAStep opens the node's second GPU, and
// its replicas there start as if nothing was parked, where local mode's
// processes serve either GPU. The core, told each process's sight, never
// hands one a GPU it cannot see (the backend would refuse it: blind).
func TestParkedHeldGPUsOnly(t *testing.T) {
	cat, wl, inv := stepOnTwoGPUs(t)
	opts := Options{ContainerStart: 20 * time.Second, Contention: DefaultContention(), Warmup: 30 * time.Second, Parked: "2"}
	anyGPU, _, e := simulate(t, "faas-gpu", wl, inv, cat, opts)
	takenAny := e.pol.(*faasGPU).taken
	opts.ParkedHeldGPUs = true
	held, _, e := simulate(t, "faas-gpu", wl, inv, cat, opts)
	p := e.pol.(*faasGPU)
	t.Logf("8x step, 20-s container start, 2 parked: %d taken, %.2f %% over the SLO seeing held GPUs only; %d taken, %.2f %% seeing any",
		p.taken, held.SLOViolations, takenAny, anyGPU.SLOViolations)
	if p.blind > 0 {
		t.Errorf("%d parked processes handed a GPU they cannot see: the core must hand one only a GPU in its sight", p.blind)
	}
	if p.taken == 0 {
		t.Fatal("no parked process taken seeing held GPUs only: the step's replicas on the held GPU should take them")
	}
	if len(p.sees) > p.parked-p.taken {
		t.Errorf("%d parked processes' GPUs kept, %d parked and not taken: the taken ones' are not forgotten", len(p.sees), p.parked-p.taken)
	}
}
