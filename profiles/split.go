package profiles

import (
	"fmt"
	"math"
)

// Split is one batch size's latency divided into a host part, which more
// SMs do not shorten (Python, framework dispatch, kernel launches, copies,
// and the serial chain of small kernels that cannot fill the SMs they are
// given), and a GPU part, the work that spreads over the SMs:
//
//	latency(sm) ≈ HostMs + GPUMs × 100 / sm
//
// fitted to the profile's curve at full quota (its lower envelope, as
// Latency reads it) by least squares on relative error. GPUMs is the GPU
// part on the whole GPU; at sm % it is GPUMs × 100 / sm. A neighbour on the
// same GPU competes only with the GPU part, and a node's CPU cores only
// with the host part: that is what the simulator's contention model reads
// (docs/profiles.md, "Host and GPU parts").
type Split struct {
	Batch  int
	HostMs float64
	GPUMs  float64
	// RMSError and MaxError are the fit's root-mean-square and largest
	// relative error over the measured SM points (0.05: 5 %).
	RMSError, MaxError float64
	// Points is how many SM points the fit used.
	Points int
}

// GPUPartMs is the GPU part of a batch on a slice of sm % of the SMs.
func (s Split) GPUPartMs(sm float64) float64 {
	if sm <= 0 {
		return math.Inf(1)
	}
	return s.GPUMs * 100 / sm
}

// MinSplitPoints is how many SM shares of one batch size a split needs:
// two determine the line, the third says how well it fits. The profiler's
// default grid measures more (profiler.DefaultSMGrid).
const MinSplitPoints = 3

// Split fits the host and GPU parts of the batch's latency at full quota.
// It needs MinSplitPoints SM shares of that batch.
func (p *Profile) Split(batch int) (Split, error) {
	c, err := p.curve(batch, FullQuota)
	if err != nil {
		return Split{}, fmt.Errorf("split of %s batch %d: %w", p.Model, batch, err)
	}
	if len(c.sm) < MinSplitPoints {
		return Split{}, fmt.Errorf("split of %s batch %d: %d SM shares measured, at least %d needed", p.Model, batch, len(c.sm), MinSplitPoints)
	}
	return fitSplit(batch, c.sm, c.env), nil
}

// fitSplit is weighted least squares of y = h + w·x, x = 100/sm, with
// weights 1/y² (relative error), constrained to h, w ≥ 0.
func fitSplit(batch int, sms []int, lat []float64) Split {
	var sw, sx, sy, sxx, sxy float64
	for i, sm := range sms {
		x, y := 100/float64(sm), lat[i]
		wt := 1 / (y * y)
		sw += wt
		sx += wt * x
		sy += wt * y
		sxx += wt * x * x
		sxy += wt * x * y
	}
	var h, w float64
	if det := sw*sxx - sx*sx; det > 1e-12*sw*sxx {
		w = (sw*sxy - sx*sy) / det
		h = (sy - w*sx) / sw
	}
	switch {
	case w <= 0: // latency does not fall with SMs: all host
		w, h = 0, sy/sw
	case h < 0: // all GPU: the line through the origin
		h, w = 0, sxy/sxx
	}
	s := Split{Batch: batch, HostMs: h, GPUMs: w, Points: len(sms)}
	var sq float64
	for i, sm := range sms {
		rel := math.Abs(h+w*100/float64(sm)-lat[i]) / lat[i]
		sq += rel * rel
		s.MaxError = max(s.MaxError, rel)
	}
	s.RMSError = math.Sqrt(sq / float64(len(sms)))
	return s
}
