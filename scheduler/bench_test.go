package scheduler

import (
	"fmt"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
)

// bigCluster is 1,000 nodes of 8 V100s with 20,000 replicas placed, each
// of 10-30 % SM and 1-3 GiB, over 200 models.
func bigCluster(b *testing.B) *Allocator {
	b.Helper()
	var inv gpu.Inventory
	for n := range 1000 {
		node := gpu.Node{Name: fmt.Sprintf("node-%04d", n)}
		for i := range 8 {
			node.GPUs = append(node.GPUs, gpu.Device{UUID: fmt.Sprintf("GPU-%04d-%d", n, i), Node: node.Name, Index: i, Product: gpu.V100Product, MemoryBytes: 16 << 30, SMCount: 80})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	c := cache.New(cache.DefaultOptions)
	a := NewAllocator(inv, c)
	now := time.Unix(0, 0)
	for i := range 20000 {
		req := gpu.Request{SMPercent: 10 + 10*(i%3), MemoryBytes: int64(1+i%3) << 30}
		model := fmt.Sprintf("m%03d", i%200)
		id := fmt.Sprintf("r%05d", i)
		if _, _, err := a.Place(id, req, Hints{Model: model, Now: now}); err != nil {
			b.Fatal(err)
		}
		c.Preload(id, model, 100<<20, now)
	}
	return a
}

// BenchmarkPlace is one placement decision (and its release) on the big
// cluster, with locality and speed hints.
func BenchmarkPlace(b *testing.B) {
	a := bigCluster(b)
	speed := func(string) float64 { return 100 }
	req := gpu.Request{SMPercent: 20, MemoryBytes: 2 << 30}
	now := time.Unix(0, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprint("bench-", i)
		if _, _, err := a.Place(id, req, Hints{Model: "m042", Now: now, Speed: speed}); err != nil {
			b.Fatal(err)
		}
		_ = a.Release(id, now)
	}
}

// BenchmarkAutoscale is one autoscaler pass over 1,000 functions of 1-8
// replicas each.
func BenchmarkAutoscale(b *testing.B) {
	ins := make([]AutoscaleInput, 1000)
	now := time.Unix(1000, 0)
	for f := range ins {
		var reps []ReplicaCapacity
		for r := range 1 + f%8 {
			reps = append(reps, ReplicaCapacity{ID: fmt.Sprintf("f%d-r%d", f, r), Config: configs[r%len(configs)]})
		}
		ins[f] = AutoscaleInput{Now: now, Rate: float64(f % 400), LastRequest: now, Policy: ScalePolicy{Min: 1, Max: 20}, Replicas: reps, Configs: configs}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, in := range ins {
			_ = Autoscale(in, DefaultAutoscaleOptions)
		}
	}
}

// BenchmarkRoute is one routing decision among 8 replicas.
func BenchmarkRoute(b *testing.B) {
	cands := make([]Candidate, 8)
	for i := range cands {
		cands[i] = Candidate{ID: fmt.Sprint("r", i), InFlight: int64(i % 3), Holds: i%4 == 0}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_ = LocalityAware(cands, 2)
	}
}

func resnet50(b *testing.B) *profiles.Profile {
	b.Helper()
	p, _, ok := builtin(b).Lookup("resnet50", gpu.V100Product)
	if !ok {
		b.Fatal("no resnet50")
	}
	return p
}

func BenchmarkChoose(b *testing.B) {
	p := resnet50(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Choose(p, 50*time.Millisecond, ChooseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChooseNoSLO(b *testing.B) {
	p := resnet50(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Choose(p, 0, ChooseOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
