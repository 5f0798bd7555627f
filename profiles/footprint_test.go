package profiles

import (
	"slices"
	"testing"
	"time"
)

// The footprint model against the per-process GPU memory FaST-GShare
// measured on a V100 with PyTorch (research notes §5.2): the estimate may
// be above a measurement (a memory limit with headroom) but never below
// (an MPS memory limit below the real footprint fails the replica).
func TestEstimateFootprintCalibration(t *testing.T) {
	tests := []struct {
		name        string
		params      int64
		measuredMiB int64
		maxOver     float64
	}{
		{"resnet50", 25557032, 1525, 0.05},
		{"resnet152", 60192808, 1745, 0.05},
		{"vit_h_14", 632045800, 4735, 0.15}, // torchvision ViT_H_14_Weights num_params
	}
	for _, tt := range tests {
		fp := EstimateFootprint(tt.params)
		got := fp.MemoryBytes >> 20
		if got < tt.measuredMiB || float64(got) > float64(tt.measuredMiB)*(1+tt.maxOver) {
			t.Errorf("%s: estimate %d MiB, measured %d MiB (allowed up to +%.0f%%)", tt.name, got, tt.measuredMiB, tt.maxOver*100)
		}
		if fp.MemoryBytes%memoryGranule != 0 || fp.ModelSizeBytes >= fp.MemoryBytes {
			t.Errorf("%s: memory %d, modelSize %d", tt.name, fp.MemoryBytes, fp.ModelSizeBytes)
		}
	}
}

func TestEstimateFootprintLoadTime(t *testing.T) {
	// resnet50: 1 s init + 102.2 MB / 0.5 GB/s + 102.2 MB / 12 GB/s.
	if got := EstimateFootprint(25557032).LoadTime; got != 1213*time.Millisecond {
		t.Errorf("resnet50 load time %s, want 1.213s", got)
	}
	small, big := EstimateFootprint(1_000_000), EstimateFootprint(600_000_000)
	if small.LoadTime < time.Second || big.LoadTime <= small.LoadTime {
		t.Errorf("load time not increasing with size: %s, %s", small.LoadTime, big.LoadTime)
	}
}

func TestTorchvisionModels(t *testing.T) {
	models := TorchvisionModels()
	if len(models) != 69 {
		t.Fatalf("%d models, want the 69 of the RaPP table", len(models))
	}
	if !slices.IsSortedFunc(models, func(a, b TorchvisionModel) int {
		if a.Name < b.Name {
			return -1
		}
		return 1 // also fails on a repeated name
	}) {
		t.Error("TorchvisionModels is not sorted by name without repeats")
	}
	for _, m := range models {
		if m.Params <= 0 || m.Source == "" {
			t.Errorf("%s: params %d, source %q", m.Name, m.Params, m.Source)
		}
		if got, ok := LookupTorchvision(m.Name); !ok || got != m {
			t.Errorf("LookupTorchvision(%s) = %+v %v", m.Name, got, ok)
		}
	}
	if _, ok := LookupTorchvision("bert"); ok {
		t.Error("LookupTorchvision(bert) found something")
	}
}
