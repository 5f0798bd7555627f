package local

import (
	"errors"
	"fmt"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// A load from the node tier (the model file in host memory or on local
// disk) skips the download and storage read of a cold load but still pays
// deserialising and the copy to the GPU; 40 % of the cold time is our
// assumption until measured (docs/scheduling.md).
const defaultNodeLoadFactor = 0.4

// defaultModelBytes sizes a model no profile describes, for the cache.
const defaultModelBytes = 256 << 20

// plan is what the profiles make of a function: its request with the
// defaults filled in, the slice of a new replica, the autoscaler's menu and
// a one-line explanation.
type plan struct {
	req        gpu.Request
	profile    *profiles.Profile
	fallback   profiles.Fallback
	base       scheduler.SliceConfig
	configs    []scheduler.SliceConfig
	autoscaled bool
	decision   string
}

func (b *Backend) planFor(spec scheduler.Function) (plan, error) {
	req := spec.GPU
	name := req.Profile
	if name == "" {
		name = req.Model
	}
	prof, fb, ok := b.cfg.Profiles.Lookup(name, b.product)
	if !ok {
		if req.Profile != "" {
			return plan{}, &gpu.FieldError{Field: gpu.AnnotationProfile, Reason: fmt.Sprintf("no profile named %q", req.Profile)}
		}
		sm := req.SliceOn(gpu.Device{}).SMPercent
		pl := plan{req: req, base: scheduler.SliceConfig{SMPercent: sm, Batch: 1}}
		pl.decision = fmt.Sprintf("%s: no profile for model %q on %s: %d%% SM as asked", spec.Name(), name, b.product, sm)
		if req.SLO > 0 {
			pl.decision += "; the SLO is not autoscaled without a profile"
		}
		return pl, nil
	}
	pl := plan{profile: prof, fallback: fb}
	if req.ModelSizeBytes == 0 {
		req.ModelSizeBytes = prof.ModelSizeBytes
	}
	if req.MemoryBytes == 0 && req.WholeGPUs == 0 && prof.MemoryBytes > 0 {
		req.MemoryBytes = prof.MemoryBytes
	}
	switch {
	case req.WholeGPUs > 0 || req.SMPercent > 0:
		sm := req.SliceOn(gpu.Device{}).SMPercent
		lat, err := latencyAt(prof, 1, float64(sm))
		if err != nil {
			return plan{}, &gpu.FieldError{Field: gpu.AnnotationSM, Reason: err.Error()}
		}
		pl.base = scheduler.SliceConfig{SMPercent: sm, Batch: 1, Throughput: 1000 / lat}
		pl.configs = []scheduler.SliceConfig{pl.base}
		pl.autoscaled = req.SLO > 0 && req.WholeGPUs == 0
		pl.decision = fmt.Sprintf("%s on %s: %d%% SM as asked, %.1f ms, %.1f req/s", name, b.product, sm, lat, pl.base.Throughput)
		if req.SLO > 0 && lat > float64(req.SLO)/float64(time.Millisecond) {
			pl.decision += fmt.Sprintf(" (above the SLO of %s)", req.SLO)
		}
		if fb.Used() {
			pl.decision += " (" + fb.String() + ")"
		}
	default:
		c, err := profiles.Choose(prof, req.SLO, profiles.ChooseOptions{Fallback: fb})
		if err != nil {
			var unmet *profiles.UnmetSLOError
			if errors.As(err, &unmet) {
				return plan{}, &gpu.FieldError{Field: gpu.AnnotationSLO, Reason: err.Error()}
			}
			return plan{}, fmt.Errorf("choose a slice for %s: %w", name, err)
		}
		req.SMPercent = c.SMPercent
		pl.base = scheduler.SliceConfig{SMPercent: c.SMPercent, Batch: c.Batch, Throughput: c.Throughput}
		pl.configs = []scheduler.SliceConfig{pl.base}
		if req.SLO > 0 {
			pl.configs = scheduler.ConfigsFromProfile(prof, req.SLO, 0)
			pl.autoscaled = true
		}
		pl.decision = c.Explanation
	}
	pl.req = req
	return pl, nil
}

// latencyAt is the profiled latency (ms) of a batch at sm % SM; below the
// smallest measured slice it takes that slice's latency, the best the data
// says such a replica can do.
func latencyAt(p *profiles.Profile, batch int, sm float64) (float64, error) {
	lat, _, err := p.SliceLatency(batch, sm)
	if errors.Is(err, profiles.ErrBelowRange) {
		if lo, _, ok := p.SMRange(batch, profiles.FullQuota); ok {
			lat, _, err = p.SliceLatency(batch, float64(lo))
		}
	}
	if errors.Is(err, profiles.ErrNotMeasured) && batch != 1 {
		return latencyAt(p, 1, sm)
	}
	return lat, err
}

// requestOf is what replica r asks of a GPU: the function's request at the
// replica's own slice, which the autoscaler may have chosen.
func requestOf(fn *function, r *replica) gpu.Request {
	req := fn.plan.req
	if req.WholeGPUs == 0 && r.config.SMPercent > 0 {
		req.SMPercent = r.config.SMPercent
	}
	return req
}
