package sim

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// steadyWorkload is one function at exactly rate req/s in every 10-s
// window (evenly spaced arrivals, rate x 10 a window), so that each
// window's measured rate is rate itself.
func steadyWorkload(f Function, rate float64, windows int) *Workload {
	wl := &Workload{Functions: []Function{f}, Duration: time.Duration(windows) * 10 * time.Second}
	perWindow := int(math.Round(rate * 10))
	for w := range windows {
		for i := range perWindow {
			at := time.Duration(w)*10*time.Second + time.Duration(i)*10*time.Second/time.Duration(perWindow)
			wl.Arrivals = append(wl.Arrivals, Arrival{At: at})
		}
	}
	return wl
}

// The queueing-aware bound prices a function at a steady rate with the
// replicas scheduler.Autoscale starts for that rate when it has none: the
// bound and the policy share one model. Models light and heavy, loose and
// tight SLOs, a floor of min replicas.
func TestQueueBoundIsTheAutoscalersPlan(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	const gpuMemory = 16 << 30
	tests := []struct {
		model     string
		sloFactor float64
		rate      float64
		min, max  int
	}{
		{"resnet50", 3.5, 200, 1, 200}, // h14, the example
		{"resnet50", 3.5, 0.5, 3, 200}, // light: min replicas decide
		{"vgg19_bn", 2, 60, 1, 200},    // heavy at a tight SLO: a pool
		{"mobilenet_v3_large", 2, 300, 1, 200},
		{"convnext_large", 2.5, 40, 1, 200},
		{"resnet18", 10, 800, 1, 4}, // capped by max replicas
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/slo-x%g/%g-rps/min-%d/max-%d", tt.model, tt.sloFactor, tt.rate, tt.min, tt.max), func(t *testing.T) {
			m, err := cat.model(tt.model, gpu.V100Product)
			if err != nil {
				t.Fatal(err)
			}
			fast, err := scheduler.LatencyAt(m.prof, 1, 100)
			if err != nil {
				t.Fatal(err)
			}
			slo := time.Duration(fast * tt.sloFactor * float64(time.Millisecond))
			f := Function{Name: "f", Model: tt.model, SLO: slo, Min: tt.min, Max: tt.max}
			const windows = 3
			lb, err := ComputeLowerBound(steadyWorkload(f, tt.rate, windows), cat, gpu.V100Product, gpuMemory, 0, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if lb.QueueErr != nil {
				t.Fatal(lb.QueueErr)
			}
			d := scheduler.Autoscale(scheduler.AutoscaleInput{
				Now: time.Unix(1e6, 0), Rate: tt.rate, Policy: scheduler.ScalePolicy{Min: tt.min, Max: tt.max},
				Configs: scheduler.ConfigsFromProfile(m.prof, slo, 0), SLO: slo,
				MemoryPercent: 100 * float64(m.memory) / gpuMemory,
			}, scheduler.DefaultAutoscaleOptions)
			if len(d.Add) == 0 {
				t.Fatalf("Autoscale adds nothing: %+v", d)
			}
			sm := 0.0
			for _, c := range d.Add {
				sm += float64(c.SMPercent) / 100
			}
			mem := float64(len(d.Add)) * float64(m.memory) / gpuMemory
			seconds := float64(windows * 10)
			for name, v := range map[string][2]float64{
				"SM":     {lb.QueueSMGPUSeconds, sm * seconds},
				"memory": {lb.QueueMemoryGPUSeconds, mem * seconds},
				"GPUs":   {lb.QueueGPUSeconds, max(sm, mem) * seconds},
				"whole":  {lb.QueueWholeGPUSeconds, math.Ceil(max(sm, mem)-1e-9) * seconds},
			} {
				if math.Abs(v[0]-v[1]) > 1e-6 {
					t.Errorf("%s: %.4f GPU-s, want %.4f (Autoscale adds %d replicas: %+v)", name, v[0], v[1], len(d.Add), d.Add)
				}
			}
		})
	}
}

// The queueing-aware bound is never below the whole-GPU bound, figure by
// figure, on every held-out workload and every published run: the pool it
// prices serves the rate at the SLO, so it books at least the SM and the
// memory of full batches at the SLO with no wait.
func TestQueueBoundIsAboveTheWholeGPUBound(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	all := append(heldOut(), scenarios()...)
	for _, sc := range all {
		t.Run(sc.name, func(t *testing.T) {
			s := sc.spec()
			inv, err := s.Cluster()
			if err != nil {
				t.Fatal(err)
			}
			dev := inv.Devices()[0]
			wl, err := s.Workload(cat, dev.Product)
			if err != nil {
				t.Fatal(err)
			}
			hasSLO := false
			for _, f := range wl.Functions {
				hasSLO = hasSLO || f.SLO > 0
			}
			if !hasSLO {
				t.Skip("no SLO: no bound")
			}
			lb, err := ComputeLowerBound(wl, cat, dev.Product, dev.MemoryBytes, s.Options.MaxBatch, 0)
			if err != nil {
				t.Fatal(err)
			}
			if lb.QueueErr != nil {
				t.Fatal(lb.QueueErr)
			}
			const eps = 1e-6
			for name, v := range map[string][2]float64{
				"SM":     {lb.QueueSMGPUSeconds, lb.SMGPUSeconds},
				"memory": {lb.QueueMemoryGPUSeconds, lb.MemoryGPUSeconds},
				"GPUs":   {lb.QueueGPUSeconds, lb.GPUSeconds},
				"whole":  {lb.QueueWholeGPUSeconds, lb.WholeGPUSeconds},
			} {
				if !(v[0] >= v[1]*(1-eps)) {
					t.Errorf("%s: queueing-aware %.1f GPU-s below the whole-GPU bound's %.1f", name, v[0], v[1])
				}
			}
		})
	}
}

// A multi-model function is priced at the models its requests name, not
// at its first model's: where every request names its heavy second model,
// the bound is that of a one-model function of it, and the queueing-aware
// bound plans the heavy model's slices.
func TestBoundPricesAMultiModelFunctionsRequestsByModel(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	const gpuMemory = 16 << 30
	const slo = 400 * time.Millisecond
	const rate = 200
	mem := int64(4 << 30)
	heavy := Function{Name: "heavy", Model: "vgg19_bn", SLO: slo, MemoryBytes: mem}
	zoo := Function{Name: "zoo", Model: "alexnet", Models: []string{"alexnet", "vgg19_bn"}, SLO: slo, MemoryBytes: mem}
	light := Function{Name: "light", Model: "alexnet", SLO: slo, MemoryBytes: mem}
	bound := func(f Function, model int32) LowerBound {
		t.Helper()
		wl := steadyWorkload(f, rate, 3)
		wl.Models = []string{"alexnet", "vgg19_bn"}
		for i := range wl.Arrivals {
			wl.Arrivals[i].Model = model
		}
		lb, err := ComputeLowerBound(wl, cat, gpu.V100Product, gpuMemory, 0, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if lb.QueueErr != nil {
			t.Fatal(lb.QueueErr)
		}
		return lb
	}
	want, got, first := bound(heavy, 1), bound(zoo, 1), bound(light, 0)
	for name, v := range map[string][2]float64{
		"SM":     {got.SMGPUSeconds, want.SMGPUSeconds},
		"memory": {got.MemoryGPUSeconds, want.MemoryGPUSeconds},
	} {
		if math.Abs(v[0]-v[1]) > 1e-9 {
			t.Errorf("%s: %.3f GPU-s, want the heavy model's %.3f", name, v[0], v[1])
		}
	}
	if got.SMGPUSeconds <= first.SMGPUSeconds {
		t.Errorf("SM %.3f GPU-s, no more than the first model's %.3f: priced at the first model", got.SMGPUSeconds, first.SMGPUSeconds)
	}
	if got.QueueSMGPUSeconds < 0.9*want.QueueSMGPUSeconds || got.QueueSMGPUSeconds <= first.QueueSMGPUSeconds {
		t.Errorf("queueing SM %.3f GPU-s: want near the heavy model's %.3f, above the first model's %.3f", got.QueueSMGPUSeconds, want.QueueSMGPUSeconds, first.QueueSMGPUSeconds)
	}
}
