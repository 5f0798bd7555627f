package sim

import (
	"testing"
	"time"
)

// BenchmarkSimulate measures the simulator's speed in simulated requests
// per wall second: each policy over 100,000 requests of 100 functions
// (Zipf 1.0 over the 69 built-in models, SLO 3.5 x their whole-GPU
// latency) on 100 V100s. The scale run in docs/evaluation.md is the
// 1,000-GPU, 1 M-request version.
func BenchmarkSimulate(b *testing.B) {
	cat, err := BuiltinCatalog()
	if err != nil {
		b.Fatal(err)
	}
	spec := Spec{Name: "bench", Models: []string{"all"}, Functions: 100, Zipf: 1, Poisson: true, Rate: 2000,
		Duration: 50 * time.Second, Seed: 1, SLOFactor: 3.5, GPUs: 100, PerNode: 8}
	inv, err := spec.Cluster()
	if err != nil {
		b.Fatal(err)
	}
	wl, err := spec.Workload(cat, inv.Devices()[0].Product)
	if err != nil {
		b.Fatal(err)
	}
	// Each policy without contention and with the built-in model: the
	// difference is what contention costs.
	for _, policy := range []string{"time-sharing", "lb", "lalb", "lalb-o3", "faas-gpu"} {
		for _, c := range []struct {
			name string
			c    *Contention
		}{{"off", nil}, {"contention", DefaultContention()}} {
			b.Run(policy+"/"+c.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := RunPolicy(Config{Workload: wl, Inventory: inv, Catalog: cat, Options: Options{Contention: c.c}}, policy); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(wl.Arrivals))*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
			})
		}
	}
}
