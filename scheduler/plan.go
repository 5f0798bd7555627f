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

// SLOQueueingFactor is how much tighter than its SLO a function's slice
// is planned: its batch latency must be at most SLO/SLOQueueingFactor.
//
// Why 2: a replica computes one batch (up to its batch size b) at a time
// in its slice's batch latency L and does not preempt it. A request that
// arrives while a batch runs waits for the rest of it (less than L), then
// runs in the next batch (L): arrival to response is under 2L. With
// L ≤ SLO/2 every request that finds at most one batch ahead of it (fewer
// than b waiting at its replica) meets the SLO, and one that finds its
// replica idle takes L. Planning with L ≤ SLO, as Choose alone
// does, lets any request that meets a running batch miss it. Queues deeper
// than one batch are not the slice's to absorb: the autoscaler prevents
// them (headroom on the rate, and the backlog drained within DrainTime).
const SLOQueueingFactor = 2

// PlanBound is the latency bound the slices of p are chosen against for
// slo: slo/SLOQueueingFactor when some measured slice (of batch ≤
// maxBatch, when maxBatch > 0) meets it, with queueSafe true. Otherwise
// it is slo itself and queueSafe is false: each batch still meets the SLO
// on its own, but a request that waits for a running batch may miss it.
// slo 0 (no SLO) is returned as is.
func PlanBound(p *profiles.Profile, slo time.Duration, maxBatch int) (bound time.Duration, queueSafe bool) {
	if slo <= 0 {
		return slo, false
	}
	half := slo / SLOQueueingFactor
	if len(ConfigsWithin(p, half, maxBatch)) > 0 {
		return half, true
	}
	return slo, false
}

// ChooseSlice is PlanFunction's slice choice for an SLO: Choose
// against PlanBound(p, slo, opts.MaxBatch), its explanation naming the
// bound ("21.1 ms ≤ SLO/2 (50ms)"). An SLO that no slice meets at
// SLO/SLOQueueingFactor but some slice meets outright is accepted: the
// slice is chosen against the SLO and the explanation carries a warning
// (docs/scheduling.md says why it is not refused). One that no slice
// meets at all is a *UnmetSLOError naming the SLO. Without an
// SLO it is Choose.
func ChooseSlice(p *profiles.Profile, slo time.Duration, opts ChooseOptions) (Choice, error) {
	if slo <= 0 {
		return Choose(p, slo, opts)
	}
	bound, queueSafe := PlanBound(p, slo, opts.MaxBatch)
	if queueSafe {
		opts.BoundName = fmt.Sprintf("SLO/%d", SLOQueueingFactor)
	}
	c, err := Choose(p, bound, opts)
	if err != nil {
		return c, err
	}
	if !queueSafe {
		c.Explanation += fmt.Sprintf("; warning: no slice meets SLO/%d (%s), so a request that waits for a running batch may miss the SLO",
			SLOQueueingFactor, slo/SLOQueueingFactor)
	}
	return c, nil
}

// PlanFunction decides a function's slice from the profiles for product:
// with an SLO, the best throughput per SM % among slices whose batch
// latency is at most SLO/SLOQueueingFactor, so that a request waiting out
// one running batch still meets the SLO (see ChooseSlice: a slice meeting
// only the SLO itself is taken with a warning; none meeting it is refused,
// naming the SLO); without, the smallest slice within 10 % of the full
// GPU; an explicit SM % wins. The autoscaler's menu (Configs) is held to
// the same bound. A model without a profile gets what it asked.
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
		case lat > sloMs/SLOQueueingFactor:
			pl.Decision += fmt.Sprintf(" (above SLO/%d = %s: a request that waits for a running batch may miss the SLO)",
				SLOQueueingFactor, req.SLO/SLOQueueingFactor)
		}
		if fb.Used() {
			pl.Decision += " (" + fb.String() + ")"
		}
	default:
		c, err := ChooseSlice(prof, req.SLO, ChooseOptions{Fallback: fb})
		if err != nil {
			var unmet *UnmetSLOError
			if errors.As(err, &unmet) {
				return Plan{}, &gpu.FieldError{Field: gpu.AnnotationSLO, Reason: err.Error()}
			}
			return Plan{}, fmt.Errorf("choose a slice for %s: %w", name, err)
		}
		req.SMPercent = c.SMPercent
		pl.Base = SliceConfig{SMPercent: c.SMPercent, Batch: c.Batch, Throughput: c.Throughput}
		pl.Configs = []SliceConfig{pl.Base}
		if req.SLO > 0 {
			pl.Configs = ConfigsFromProfile(prof, req.SLO, 0)
			pl.Autoscaled = true
		}
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
