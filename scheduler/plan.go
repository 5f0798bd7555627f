package scheduler

import (
	"errors"
	"fmt"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
)

// Plan is what the profiles make of a function: its request with the
// defaults filled in, the slice of a new replica, the autoscaler's menu
// and a one-line explanation.
type Plan struct {
	Request    gpu.Request
	Profile    *profiles.Profile
	Fallback   profiles.Fallback
	Base       SliceConfig
	Configs    []SliceConfig
	Autoscaled bool
	Decision   string
}

// ModelRoom is how many bytes of models a replica of the plan holds in
// memBytes of GPU memory once its process is paid for: the profile's
// footprint less its model (the CUDA context and framework), where the
// profile says so.
func (p Plan) ModelRoom(memBytes int64) int64 {
	if pr := p.Profile; pr != nil && pr.MemoryBytes > pr.ModelSizeBytes {
		memBytes -= pr.MemoryBytes - pr.ModelSizeBytes
	}
	return max(memBytes, 0)
}

// ChooseSlice is PlanFunction's slice choice for an SLO: among measured
// slices (of batch ≤ opts.MaxBatch, when set) that carry load within the
// SLO at its p99 (QueueCapacity > 0: a request that meets a running batch
// still meets the SLO, 2L - L/b < SLO), the most capacity at the SLO per
// SM %; ties go to the smaller SM %, then the smaller batch. The same
// queueing model the autoscaler plans with chooses, so a tight SLO needs
// no other rule: an SLO no slice carries load within is a *UnmetSLOError
// naming the SLO and the fastest slice. Without an SLO it is Choose.
func ChooseSlice(p *profiles.Profile, slo time.Duration, opts ChooseOptions) (Choice, error) {
	c, _, err := chooseSlice(p, slo, opts)
	return c, err
}

// chooseSlice is ChooseSlice with the menu it chose from, p's
// ConfigsFromProfile at slo and opts.MaxBatch (nil without an SLO):
// PlanFunction keeps it as the autoscaler's rather than build it twice
// (the lone-replica model solves a chain per slice).
func chooseSlice(p *profiles.Profile, slo time.Duration, opts ChooseOptions) (Choice, []SliceConfig, error) {
	if slo <= 0 {
		c, err := Choose(p, slo, opts)
		return c, nil, err
	}
	if _, err := Choose(p, slo, opts); err != nil {
		return Choice{}, nil, err // a bad argument, or no slice meets the SLO at all
	}
	menu := ConfigsFromProfile(p, slo, opts.MaxBatch)
	c, err := chooseFrom(p, menu, slo, opts)
	return c, menu, err
}

// PlanSlices is what a function's replicas are planned on: ChooseSlice's
// choice, the slice its first replicas start with (the menu's own entry,
// with its batch timings, so that it is valued as on the menu) and the
// menu the autoscaler plans on (p's ConfigsFromProfile at slo and
// opts.MaxBatch; that slice alone without an SLO).
func PlanSlices(p *profiles.Profile, slo time.Duration, opts ChooseOptions) (Choice, SliceConfig, []SliceConfig, error) {
	c, menu, err := chooseSlice(p, slo, opts)
	if err != nil {
		return Choice{}, SliceConfig{}, nil, err
	}
	base := SliceConfig{SMPercent: c.SMPercent, Batch: c.Batch, Throughput: c.Throughput}
	for _, x := range menu {
		if x.SMPercent == c.SMPercent && x.Batch == c.Batch {
			base = x
		}
	}
	if slo <= 0 {
		return c, base, []SliceConfig{base}, nil
	}
	return c, base, menu, nil
}

// chooseFrom is ChooseSlice's choice among menu.
func chooseFrom(p *profiles.Profile, menu []SliceConfig, slo time.Duration, opts ChooseOptions) (Choice, error) {
	var best SliceConfig
	bestCap := 0.0
	for _, c := range menu {
		q := QueueCapacity(c, slo, DefaultSLOQuantile)
		e, be := q/float64(c.SMPercent), bestCap/float64(max(best.SMPercent, 1))
		if best.Batch == 0 || e > be*(1+1e-9) || (e >= be*(1-1e-9) && (c.SMPercent < best.SMPercent || c.SMPercent == best.SMPercent && c.Batch < best.Batch)) {
			best, bestCap = c, q
		}
	}
	if best.Batch == 0 {
		// Slices meet the SLO on their own but none once a request waits
		// for a running batch: refused, with the fastest slice named.
		_, err := Choose(p, time.Nanosecond, opts)
		var unmet *UnmetSLOError
		if errors.As(err, &unmet) {
			unmet.SLO = slo
			return Choice{}, unmet
		}
		return Choice{}, err
	}
	lat, err := LatencyAt(p, best.Batch, float64(best.SMPercent))
	if err != nil {
		return Choice{}, err
	}
	product := p.GPU
	if opts.Fallback.Used() {
		product = opts.Fallback.Requested
	}
	c := Choice{SMPercent: best.SMPercent, Batch: best.Batch, LatencyMs: lat, Throughput: best.Throughput, Fallback: opts.Fallback}
	c.Explanation = explain(p.Model, product, c,
		fmt.Sprintf("%.1f ms, %.1f req/s within SLO %s at p99", lat, bestCap, slo), opts.Fallback)
	return c, nil
}

// PlanFunction decides a function's slice from the profiles for product:
// with an SLO, the most capacity at the SLO's p99 per SM % among slices
// that carry any load within it (ChooseSlice; none: refused, naming the
// SLO); without, the smallest slice within 10 % of the full GPU; an
// explicit SM % wins. The autoscaler's menu (Configs) is every slice that
// carries load within the SLO. A model without a profile gets what it
// asked.
func PlanFunction(spec Function, store *profiles.Store, product string) (Plan, error) {
	req := spec.GPU
	name := req.Profile
	if name == "" {
		name = req.Model
	}
	prof, fb, ok := store.Lookup(name, product)
	if !ok {
		if req.Profile != "" {
			return Plan{}, &gpu.FieldError{Field: gpu.AnnotationProfile, Reason: fmt.Sprintf("no profile named %q", req.Profile)}
		}
		sm := req.SliceOn(gpu.Device{}).SMPercent
		pl := Plan{Request: req, Base: SliceConfig{SMPercent: sm, Batch: 1}}
		pl.Decision = fmt.Sprintf("%s: no profile for model %q on %s: %d%% SM as asked", spec.Name(), name, product, sm)
		if req.SLO > 0 {
			pl.Decision += "; the SLO is not autoscaled without a profile"
		}
		return pl, nil
	}
	pl := Plan{Profile: prof, Fallback: fb}
	if req.ModelSizeBytes == 0 {
		req.ModelSizeBytes = prof.ModelSizeBytes
	}
	if req.MemoryBytes == 0 && req.WholeGPUs == 0 && prof.MemoryBytes > 0 {
		req.MemoryBytes = prof.MemoryBytes
	}
	switch {
	case req.WholeGPUs > 0 || req.SMPercent > 0:
		sm := req.SliceOn(gpu.Device{}).SMPercent
		lat, err := LatencyAt(prof, 1, float64(sm))
		if err != nil {
			return Plan{}, &gpu.FieldError{Field: gpu.AnnotationSM, Reason: err.Error()}
		}
		pl.Base = SliceConfig{SMPercent: sm, Batch: 1, Throughput: 1000 / lat}
		pl.Configs = []SliceConfig{pl.Base}
		pl.Autoscaled = req.SLO > 0 && req.WholeGPUs == 0
		pl.Decision = fmt.Sprintf("%s on %s: %d%% SM as asked, %.1f ms, %.1f req/s", name, product, sm, lat, pl.Base.Throughput)
		switch sloMs := float64(req.SLO) / float64(time.Millisecond); {
		case req.SLO <= 0:
		case lat > sloMs:
			pl.Decision += fmt.Sprintf(" (above the SLO of %s)", req.SLO)
		}
		if fb.Used() {
			pl.Decision += " (" + fb.String() + ")"
		}
	default:
		c, base, configs, err := PlanSlices(prof, req.SLO, ChooseOptions{Fallback: fb})
		if err != nil {
			var unmet *UnmetSLOError
			if errors.As(err, &unmet) {
				return Plan{}, &gpu.FieldError{Field: gpu.AnnotationSLO, Reason: err.Error()}
			}
			return Plan{}, fmt.Errorf("choose a slice for %s: %w", name, err)
		}
		req.SMPercent = c.SMPercent
		pl.Base, pl.Configs, pl.Autoscaled = base, configs, req.SLO > 0
		pl.Decision = c.Explanation
	}
	pl.Request = req
	return pl, nil
}

// LatencyAt is the profiled latency (ms) of a batch at sm % SM; below the
// smallest measured slice it takes that slice's latency, the best the data
// says such a replica can do.
func LatencyAt(p *profiles.Profile, batch int, sm float64) (float64, error) {
	lat, _, err := p.SliceLatency(batch, sm)
	if errors.Is(err, profiles.ErrBelowRange) {
		if lo, _, ok := p.SMRange(batch, profiles.FullQuota); ok {
			lat, _, err = p.SliceLatency(batch, float64(lo))
		}
	}
	if errors.Is(err, profiles.ErrNotMeasured) && batch != 1 {
		return LatencyAt(p, 1, sm)
	}
	return lat, err
}

// RequestFor is what a replica of slice c asks of a GPU: the function's
// request at that SM %, which the autoscaler may have chosen.
func (p Plan) RequestFor(c SliceConfig) gpu.Request {
	req := p.Request
	if req.WholeGPUs == 0 && c.SMPercent > 0 {
		req.SMPercent = c.SMPercent
	}
	return req
}
