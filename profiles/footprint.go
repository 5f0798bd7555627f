package profiles

import (
	"math"
	"time"
)

// The footprint model turns a parameter count into the GPU memory and the
// load time of one replica. docs/profiles.md gives the calibration; in
// short:
//
//   - memory = CUDA context and framework + modelSize, where
//     modelSize = 1.6 × fp32 weights. Fitted to FaST-GShare's per-process
//     footprints measured on a V100 with PyTorch (ResNet-50 1525 MiB,
//     ResNet-152 1745 MiB), with the context rounded up so both stay
//     under the estimate; ViT-H/14 (4735 MiB) comes out 10 % over.
//   - loadTime = runtime init + weights / deserialize rate + weights /
//     host-to-device bandwidth, from the typical values in the research
//     notes (context creation 0.3-1 s, torch.load + .cuda() of a 100 MB
//     CNN 0.1-0.5 s, PCIe 3.0 x16 about 12 GB/s).
const (
	bytesPerParam       = 4 // fp32
	contextBytes        = 1400 << 20
	modelSizeFactor     = 1.6
	memoryGranule       = 64 << 20
	runtimeInit         = time.Second
	deserializeRate     = 0.5e9 // bytes/s
	hostToDeviceRate    = 12e9  // bytes/s
	loadTimeGranularity = time.Millisecond
)

// Footprint is a model's estimated GPU memory and load time.
type Footprint struct {
	// Params is the parameter count the estimate starts from.
	Params int64
	// ModelSizeBytes is what the model takes in GPU memory beyond the
	// CUDA context: fp32 weights and what scales with them.
	ModelSizeBytes int64
	// MemoryBytes is one replica's GPU memory, CUDA context included,
	// rounded up to 64 MiB.
	MemoryBytes int64
	// LoadTime is process start to model ready on the GPU.
	LoadTime time.Duration
}

// EstimateFootprint applies the footprint model to a parameter count.
func EstimateFootprint(params int64) Footprint {
	weights := float64(params * bytesPerParam)
	modelSize := roundUp(int64(math.Ceil(weights*modelSizeFactor)), 1<<20)
	load := runtimeInit + time.Duration((weights/deserializeRate+weights/hostToDeviceRate)*float64(time.Second))
	return Footprint{
		Params:         params,
		ModelSizeBytes: modelSize,
		MemoryBytes:    roundUp(contextBytes+modelSize, memoryGranule),
		LoadTime:       load.Round(loadTimeGranularity),
	}
}

func roundUp(n, granule int64) int64 {
	return (n + granule - 1) / granule * granule
}
