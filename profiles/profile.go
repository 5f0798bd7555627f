package profiles

import (
	"fmt"
	"math"
	"regexp"
	"time"
)

// FullQuota is the time quota faas-gpu runs replicas at: slices are MPS
// SM partitions with no time sharing, so every decision reads the
// profile's quota-100 points.
const FullQuota = 100

// Profile is the measured behaviour of one model on one GPU product.
//
// A Profile returned by Parse, ImportCSV or a Store carries an index of its
// latency curves; change Points only through Parse or Store.Add, never in
// place, or Latency answers from the old index.
type Profile struct {
	// Model is the model identity (com.openfaas.gpu.model).
	Model string
	// GPU is the product name as NVML reports it, e.g. gpu.V100Product.
	GPU string
	// MemoryBytes is the GPU memory one replica serving the model takes,
	// CUDA context included (0: unknown).
	MemoryBytes int64
	// ModelSizeBytes is the part of MemoryBytes the model itself takes
	// (weights and what scales with them), i.e. what one more model costs
	// in a process that already holds a CUDA context (0: unknown).
	ModelSizeBytes int64
	// LoadTime is how long a new replica takes from process start to the
	// model ready on the GPU, on a cache miss (0: unknown).
	LoadTime time.Duration
	// Source says where the numbers come from.
	Source string
	// Points are the measurements.
	Points []Point

	curves *curveIndex
}

// Point is one measurement: a batch of Batch requests took Latency
// milliseconds on a slice of SM percent of the GPU's SMs, holding the GPU
// for Quota percent of the time.
type Point struct {
	Batch   int     `json:"batch"`
	SM      int     `json:"sm"`
	Quota   int     `json:"quota"`
	Latency float64 `json:"latency"`
}

// Throughput is the request rate (req/s) one replica sustains at this
// point when it serves back-to-back batches.
func (pt Point) Throughput() float64 { return throughput(pt.Batch, pt.Latency) }

func throughput(batch int, latencyMs float64) float64 {
	return float64(batch) * 1000 / latencyMs
}

// modelName is the rule gpu.ParseRequest applies to the model annotation:
// profiles are looked up by that value and written to <model>.yaml.
var modelName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validate checks p and builds its curve index. Errors name the field the
// way the file spells it.
func (p *Profile) validate() error {
	switch {
	case p.Model == "":
		return fmt.Errorf("model: must not be empty")
	case !modelName.MatchString(p.Model):
		return fmt.Errorf("model: %q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", p.Model)
	case p.GPU == "":
		return fmt.Errorf("gpu: must name the GPU product the profile was measured on")
	case p.MemoryBytes < 0:
		return fmt.Errorf("memory: must not be negative")
	case p.ModelSizeBytes < 0:
		return fmt.Errorf("modelSize: must not be negative")
	case p.MemoryBytes > 0 && p.ModelSizeBytes > p.MemoryBytes:
		return fmt.Errorf("modelSize: larger than memory")
	case p.LoadTime < 0:
		return fmt.Errorf("loadTime: must not be negative")
	case len(p.Points) == 0:
		return fmt.Errorf("points: at least one point is needed")
	}
	seen := make(map[curveKey]map[int]int, 8)
	for i, pt := range p.Points {
		if err := pt.validate(); err != nil {
			return fmt.Errorf("points[%d].%w", i, err)
		}
		k := curveKey{batch: pt.Batch, quota: pt.Quota}
		if seen[k] == nil {
			seen[k] = map[int]int{}
		}
		if j, dup := seen[k][pt.SM]; dup {
			return fmt.Errorf("points[%d]: batch %d sm %d quota %d already measured in points[%d]", i, pt.Batch, pt.SM, pt.Quota, j)
		}
		seen[k][pt.SM] = i
	}
	p.curves = buildCurves(p.Points)
	return nil
}

func (pt Point) validate() error {
	switch {
	case pt.Batch < 1:
		return fmt.Errorf("batch: %d must be at least 1", pt.Batch)
	case pt.SM < 1 || pt.SM > 100:
		return fmt.Errorf("sm: %d is outside 1-100", pt.SM)
	case pt.Quota < 1 || pt.Quota > 100:
		return fmt.Errorf("quota: %d is outside 1-100", pt.Quota)
	case math.IsNaN(pt.Latency) || math.IsInf(pt.Latency, 0) || pt.Latency <= 0:
		return fmt.Errorf("latency: %v must be a positive number of milliseconds", pt.Latency)
	}
	return nil
}

// clone copies p deeply, so a Store never shares Points with its caller.
func (p Profile) clone() Profile {
	p.Points = append([]Point(nil), p.Points...)
	return p
}
