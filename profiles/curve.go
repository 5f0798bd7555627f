package profiles

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var (
	// ErrNotMeasured means the profile has no points at the asked batch
	// and quota: batches and quotas are never interpolated.
	ErrNotMeasured = errors.New("not measured")
	// ErrBelowRange means the asked SM % is below the smallest measured
	// one. The latency there is unknown and could be far higher, so no
	// number is given rather than an optimistic one.
	ErrBelowRange = errors.New("below the measured SM range")
)

// Estimate says how a latency was obtained from the measured points.
type Estimate uint8

const (
	// Exact: the SM % is a measured point.
	Exact Estimate = iota + 1
	// Interpolated: linear between the two measured SM points around it.
	Interpolated
	// Clamped: above the largest measured SM %; the latency at that
	// point is given, which is safe because more SMs are never slower.
	Clamped
)

func (e Estimate) String() string {
	switch e {
	case Exact:
		return "exact"
	case Interpolated:
		return "interpolated"
	case Clamped:
		return "clamped"
	}
	return "unknown"
}

type curveKey struct{ batch, quota int }

// curve is latency against SM % for one batch and quota. env is the lower
// envelope of raw from the small-SM side, env[i] = min(raw[0..i]): the
// measurements are noisy (latency sometimes rises with more SMs), and a
// replica given more SMs can always be treated as no slower than with
// fewer, so callers see latency non-increasing in SM %.
type curve struct {
	sm  []int
	raw []float64
	env []float64
}

type curveIndex struct {
	curves  map[curveKey]*curve
	batches map[int][]int // quota -> measured batches, ascending
}

func buildCurves(points []Point) *curveIndex {
	byKey := map[curveKey][]Point{}
	for _, pt := range points {
		k := curveKey{pt.Batch, pt.Quota}
		byKey[k] = append(byKey[k], pt)
	}
	idx := &curveIndex{curves: make(map[curveKey]*curve, len(byKey)), batches: map[int][]int{}}
	for k, pts := range byKey {
		slices.SortFunc(pts, func(a, b Point) int { return a.SM - b.SM })
		c := &curve{sm: make([]int, len(pts)), raw: make([]float64, len(pts)), env: make([]float64, len(pts))}
		for i, pt := range pts {
			c.sm[i], c.raw[i], c.env[i] = pt.SM, pt.Latency, pt.Latency
			if i > 0 {
				c.env[i] = min(c.env[i], c.env[i-1])
			}
		}
		idx.curves[k] = c
		idx.batches[k.quota] = append(idx.batches[k.quota], k.batch)
	}
	for _, b := range idx.batches {
		slices.Sort(b)
	}
	return idx
}

// index is the curve index built by validate, or a fresh one for a
// Profile built by hand (never stored: p may be shared between
// goroutines).
func (p *Profile) index() *curveIndex {
	if p.curves != nil {
		return p.curves
	}
	return buildCurves(p.Points)
}

func (p *Profile) curve(batch, quota int) (*curve, error) {
	idx := p.index()
	if c := idx.curves[curveKey{batch, quota}]; c != nil {
		return c, nil
	}
	if len(idx.batches[quota]) == 0 {
		return nil, fmt.Errorf("%s on %s: no points at quota %d%%: %w", p.Model, p.GPU, quota, ErrNotMeasured)
	}
	return nil, fmt.Errorf("%s on %s: no points at batch %d quota %d%% (measured batches: %s): %w",
		p.Model, p.GPU, batch, quota, joinInts(idx.batches[quota]), ErrNotMeasured)
}

// Curve is one measured curve of a profile, read-only: the latency of a
// batch at a quota against SM %, ascending in SM %, with the latency read
// from the lower envelope as Latency reads it. It is how a decision outside
// this package walks the measured points without copying them.
type Curve struct {
	Batch, Quota int
	c            *curve
}

// Len is the number of measured SM points.
func (c Curve) Len() int { return len(c.c.sm) }

// SM is the i-th measured SM %, ascending.
func (c Curve) SM(i int) int { return c.c.sm[i] }

// Latency is the envelope latency (ms) at the i-th measured SM %: the
// lowest measured at that SM % or any smaller one.
func (c Curve) Latency(i int) float64 { return c.c.env[i] }

// Curve is the measured curve at batch and quota; a batch or quota with no
// points is an error wrapping ErrNotMeasured that lists what was measured.
func (p *Profile) Curve(batch, quota int) (Curve, error) {
	c, err := p.curve(batch, quota)
	if err != nil {
		return Curve{}, err
	}
	return Curve{Batch: batch, Quota: quota, c: c}, nil
}

// Curves are the measured curves at quota, ascending in batch.
func (p *Profile) Curves(quota int) []Curve {
	idx := p.index()
	out := make([]Curve, 0, len(idx.batches[quota]))
	for _, b := range idx.batches[quota] {
		out = append(out, Curve{Batch: b, Quota: quota, c: idx.curves[curveKey{b, quota}]})
	}
	return out
}

// Latency is the time (ms) one batch takes on a slice of sm percent of the
// GPU's SMs at the given time quota, read from the lower envelope of the
// measured points (see curve) and interpolated linearly between measured
// SM points. Above the largest measured SM % the value is Clamped; below
// the smallest it is an error wrapping ErrBelowRange.
func (p *Profile) Latency(batch int, sm float64, quota int) (float64, Estimate, error) {
	if !(sm > 0 && sm <= 100) {
		return 0, 0, fmt.Errorf("%s on %s: sm %v%% is outside (0, 100]", p.Model, p.GPU, sm)
	}
	c, err := p.curve(batch, quota)
	if err != nil {
		return 0, 0, err
	}
	i, found := slices.BinarySearchFunc(c.sm, sm, func(m int, s float64) int {
		switch {
		case float64(m) < s:
			return -1
		case float64(m) > s:
			return 1
		}
		return 0
	})
	switch {
	case found:
		return c.env[i], Exact, nil
	case i == 0:
		return 0, 0, fmt.Errorf("%s on %s: sm %v%% at batch %d quota %d%%: smallest measured is %d%%: %w",
			p.Model, p.GPU, sm, batch, quota, c.sm[0], ErrBelowRange)
	case i == len(c.sm):
		return c.env[i-1], Clamped, nil
	}
	lo, hi := float64(c.sm[i-1]), float64(c.sm[i])
	f := (sm - lo) / (hi - lo)
	return c.env[i-1] + f*(c.env[i]-c.env[i-1]), Interpolated, nil
}

// SliceLatency is Latency at FullQuota, the way faas-gpu runs replicas.
func (p *Profile) SliceLatency(batch int, sm float64) (float64, Estimate, error) {
	return p.Latency(batch, sm, FullQuota)
}

// Throughput is the request rate (req/s) one replica with sm percent of
// the SMs sustains serving back-to-back batches: batch × 1000 / latency.
func (p *Profile) Throughput(batch int, sm float64) (float64, Estimate, error) {
	lat, est, err := p.SliceLatency(batch, sm)
	if err != nil {
		return 0, 0, err
	}
	return throughput(batch, lat), est, nil
}

// Batches lists the batch sizes measured at quota, ascending.
func (p *Profile) Batches(quota int) []int {
	return slices.Clone(p.index().batches[quota])
}

// SMRange is the smallest and largest SM % measured at batch and quota.
func (p *Profile) SMRange(batch, quota int) (lo, hi int, ok bool) {
	c := p.index().curves[curveKey{batch, quota}]
	if c == nil {
		return 0, 0, false
	}
	return c.sm[0], c.sm[len(c.sm)-1], true
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
