package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// scenario is one of the runs docs/evaluation.md publishes.
type scenario struct {
	name, about string
	spec        func() Spec
}

// scenarios are the published runs; every value is here so that the
// command in docs/evaluation.md is the whole recipe. SLOs are 3.5 x the
// model's batch-1 latency on a whole V100: ResNet-50's 19.8 ms gives
// 70 ms, FaST-GShare's ResNet SLO of 69 ms (slide 18).
func scenarios() []scenario {
	return []scenario{
		{"consolidation", "FaST-GShare slide 18: 8 functions (4 x resnet50, 2 x resnet152, 2 x convnext_base for its ResNet, RNNT and BERT pods) at 10 req/s each on 4 nodes of 1 V100: GPUs used, utilisation, SM occupancy", func() Spec {
			return Spec{Name: "consolidation", Models: []string{"resnet50*4", "resnet152*2", "convnext_base*2"},
				Poisson: true, Rate: 80, Duration: 5 * time.Minute, Seed: 1, SLOFactor: 3.5, GPUs: 4, PerNode: 1,
				Options: Options{Warmup: 30 * time.Second}}
		}},
		{"throughput", "FaST-GShare slide 17: the same 8 functions offered far more than any policy serves (1,000 req/s each) on the same 4 GPUs: the throughput each policy sustains", func() Spec {
			return Spec{Name: "throughput", Models: []string{"resnet50*4", "resnet152*2", "convnext_base*2"},
				Poisson: true, Rate: 8000, Duration: 2 * time.Minute, Seed: 1, SLOFactor: 3.5, GPUs: 4, PerNode: 1,
				Options: Options{Warmup: time.Minute, Drain: time.Second}}
		}},
		{"locality", "GPU-enabled FaaS paper: one function serving 35 models (X-Model), Zipf 1.1 popularity, Poisson arrivals, on 4 V100s of one node whose memory cannot hold all 35 models each", func() Spec {
			return Spec{Name: "locality", Models: []string{"largest:35"}, MultiModel: true, Zipf: 1.1,
				Poisson: true, Rate: 20, Duration: 20 * time.Minute, Seed: 1, GPUs: 4, PerNode: 4, Min: 4, Max: 4,
				MemoryBytes: 16 << 30, Options: Options{Warmup: 2 * time.Minute}}
		}},
		{"cost", "cost at an SLO: 10 models (spread:10), Zipf 1.0 shares, total load ramping 100 -> 1,500 -> 100 req/s over 30 min, on up to 64 V100s (8 nodes of 8), up to 200 replicas a function", func() Spec {
			return Spec{Name: "cost", Models: []string{"spread:10"}, Zipf: 1.0, Poisson: true,
				Ramp:     Ramp{{0, 100}, {2 * time.Minute, 100}, {10 * time.Minute, 1500}, {15 * time.Minute, 1500}, {25 * time.Minute, 100}, {30 * time.Minute, 100}},
				Duration: 30 * time.Minute, Seed: 1, SLOFactor: 3.5, Max: 200, GPUs: 64, PerNode: 8}
		}},
		{"scale", "the simulator's speed: 1,000 functions over the 69 models, Zipf 1.0, 10,000 req/s from the first second for 100 s (1 M requests) on 1,000 V100s (125 nodes of 8), up to 200 replicas a function, faas-gpu", func() Spec {
			return Spec{Name: "scale", Models: []string{"all"}, Functions: 1000, Zipf: 1.0, Poisson: true, Rate: 10000,
				Duration: 100 * time.Second, Seed: 1, SLOFactor: 3.5, Max: 200, GPUs: 1000, PerNode: 8, Policies: []string{"faas-gpu"}}
		}},
	}
}

// ScenarioNames lists the published scenarios.
func ScenarioNames() []string {
	var out []string
	for _, s := range scenarios() {
		out = append(out, s.name)
	}
	return out
}

// Scenario returns a published scenario's spec and what it measures.
func Scenario(name string) (Spec, string, error) {
	for _, s := range scenarios() {
		if s.name == name {
			sp := s.spec()
			if len(sp.Policies) == 0 {
				sp.Policies = PolicyNames()
			}
			return sp, s.about, nil
		}
	}
	return Spec{}, "", fmt.Errorf("unknown scenario %q (known: %s)", name, strings.Join(slices.Clone(ScenarioNames()), ", "))
}
