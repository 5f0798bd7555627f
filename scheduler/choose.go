package scheduler

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// noSLOTolerance is how much slower than the full GPU a slice may be when
// a function has no SLO: 10 % buys a much smaller slice for most models
// (the median RaPP model gets there with 10 % of the SMs at batch 1,
// research notes §5.3).
const noSLOTolerance = 1.10

// ChooseOptions narrows a config choice.
type ChooseOptions struct {
	// MaxBatch caps the batch size (0: any measured batch); a function
	// that cannot batch requests sets 1.
	MaxBatch int
	// Fallback is Store.Lookup's answer; when used, the explanation says
	// the profile was measured on another product.
	Fallback profiles.Fallback
	// BoundName names the latency bound in the explanation when the
	// caller chooses against a bound derived from the SLO rather than the
	// SLO itself: "SLO/2" reads "21.1 ms ≤ SLO/2 (50ms)". Empty: the bound
	// is the SLO ("21.1 ms ≤ SLO 50ms").
	BoundName string
}

// Choice is the slice a function's replicas get.
type Choice struct {
	SMPercent  int
	Batch      int
	LatencyMs  float64
	Throughput float64 // req/s of one replica
	// Explanation is one line for logs and /system/gpus.
	Explanation string
	Fallback    profiles.Fallback
}

// ThroughputPerSM is the figure of merit of a slice: req/s per SM %.
func (c Choice) ThroughputPerSM() float64 { return c.Throughput / float64(c.SMPercent) }

// UnmetSLOError says no measured slice meets the SLO; Best is the
// lowest-latency slice, for a caller that runs anyway.
type UnmetSLOError struct {
	Model, Product string
	SLO            time.Duration
	Best           Choice
}

func (e *UnmetSLOError) Error() string {
	return fmt.Sprintf("%s on %s: no slice meets SLO %s: best achievable is %.1f ms (sm %d%% batch %d)",
		e.Model, e.Product, e.SLO, e.Best.LatencyMs, e.Best.SMPercent, e.Best.Batch)
}

// Choose picks the slice (SM %, batch) for p's model at
// profiles.FullQuota, among measured points only:
//
//   - with an SLO: the point whose latency meets it with the best
//     throughput per SM %; ties go to the smaller SM %, then the smaller
//     batch. None meeting it is an *UnmetSLOError.
//   - with no SLO (0): batch 1 and the smallest SM % whose latency is
//     within 10 % of the full-GPU latency.
//
// Latencies are read from the profile's curves (the lower envelope, as
// Profile.Latency reads them), which never changes the SLO answer: a point
// the envelope lowers is always beaten by the smaller-SM point it took its
// latency from. It compares the bound with one batch's latency; the bound
// PlanFunction holds a function to is ChooseSlice's.
func Choose(p *profiles.Profile, slo time.Duration, opts ChooseOptions) (Choice, error) {
	product := p.GPU
	if opts.Fallback.Used() {
		product = opts.Fallback.Requested
	}
	switch {
	case slo < 0:
		return Choice{}, fmt.Errorf("%s on %s: SLO %s is negative", p.Model, product, slo)
	case opts.MaxBatch < 0:
		return Choice{}, fmt.Errorf("%s on %s: max batch %d is negative", p.Model, product, opts.MaxBatch)
	case slo == 0:
		return chooseWithoutSLO(p, product, opts)
	}

	sloMs := float64(slo) / float64(time.Millisecond)
	var best, fastest Choice
	for _, c := range p.Curves(profiles.FullQuota) {
		if opts.MaxBatch > 0 && c.Batch > opts.MaxBatch {
			break
		}
		for i := range c.Len() {
			cand := choiceAt(c, i)
			if fastest.Batch == 0 || cand.LatencyMs < fastest.LatencyMs {
				fastest = cand
			}
			if cand.LatencyMs <= sloMs && (best.Batch == 0 || moreEfficient(cand, best)) {
				best = cand
			}
		}
	}
	switch {
	case fastest.Batch == 0: // no batch under the cap
		return Choice{}, noBatchErr(p, product, opts.MaxBatch)
	case best.Batch == 0:
		fastest.Fallback = opts.Fallback
		return Choice{}, &UnmetSLOError{Model: p.Model, Product: product, SLO: slo, Best: fastest}
	}
	best.Fallback = opts.Fallback
	why := fmt.Sprintf("%.1f ms ≤ SLO %s", best.LatencyMs, slo)
	if opts.BoundName != "" {
		why = fmt.Sprintf("%.1f ms ≤ %s (%s)", best.LatencyMs, opts.BoundName, slo)
	}
	best.Explanation = explain(p.Model, product, best, why, opts.Fallback)
	return best, nil
}

// choiceAt is the slice at c's i-th measured point, with the throughput
// one replica sustains there as profiles computes it.
func choiceAt(c profiles.Curve, i int) Choice {
	lat := c.Latency(i)
	return Choice{SMPercent: c.SM(i), Batch: c.Batch, LatencyMs: lat,
		Throughput: profiles.Point{Batch: c.Batch, Latency: lat}.Throughput()}
}

// moreEfficient orders candidates: throughput per SM % (higher first, equal
// within float noise), then SM %, then batch (smaller first).
func moreEfficient(a, b Choice) bool {
	ea, eb := a.ThroughputPerSM(), b.ThroughputPerSM()
	if math.Abs(ea-eb) > 1e-9*math.Max(ea, eb) {
		return ea > eb
	}
	if a.SMPercent != b.SMPercent {
		return a.SMPercent < b.SMPercent
	}
	return a.Batch < b.Batch
}

func chooseWithoutSLO(p *profiles.Profile, product string, opts ChooseOptions) (Choice, error) {
	c, err := p.Curve(1, profiles.FullQuota)
	if err != nil {
		return Choice{}, err
	}
	// The largest measured SM % stands for the full GPU; its envelope
	// value is the best latency seen at any SM %.
	full := c.Latency(c.Len() - 1)
	for i := range c.Len() {
		if c.Latency(i) <= full*noSLOTolerance {
			ch := choiceAt(c, i)
			ch.Fallback = opts.Fallback
			ch.Explanation = explain(p.Model, product, ch,
				fmt.Sprintf("%.1f ms within 10%% of full-GPU %.1f ms (no SLO)", ch.LatencyMs, full), opts.Fallback)
			return ch, nil
		}
	}
	panic("unreachable: the last point is within tolerance of itself")
}

func noBatchErr(p *profiles.Profile, product string, maxBatch int) error {
	measured := p.Batches(profiles.FullQuota)
	s := make([]string, len(measured))
	for i, b := range measured {
		s[i] = strconv.Itoa(b)
	}
	return fmt.Errorf("%s on %s: no batch ≤ %d measured at quota %d%% (measured: %s): %w",
		p.Model, product, maxBatch, profiles.FullQuota, strings.Join(s, ", "), profiles.ErrNotMeasured)
}

func explain(model, product string, c Choice, why string, fb profiles.Fallback) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s on %s: sm %d%% batch %d, %s, %.1f req/s (%.1f req/s per SM%%)",
		model, product, c.SMPercent, c.Batch, why, c.Throughput, c.ThroughputPerSM())
	if fb.Used() {
		b.WriteString(" (" + fb.String() + ")")
	}
	return b.String()
}

// ChooseModel looks up model's profile for product in store (see
// Store.Lookup) and chooses its slice with Choose; a profile from another
// product is flagged in the explanation. A model with no profile is an
// error wrapping profiles.ErrNoProfile.
func ChooseModel(store *profiles.Store, model, product string, slo time.Duration, opts ChooseOptions) (Choice, error) {
	p, fb, ok := store.Lookup(model, product)
	if !ok {
		return Choice{}, fmt.Errorf("model %q: %w", model, profiles.ErrNoProfile)
	}
	opts.Fallback = fb
	return Choose(p, slo, opts)
}
