package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Shape is an offered request rate (req/s) over time.
type Shape interface {
	Rate(t time.Duration) float64
	// Peak is an upper bound of Rate, for thinning.
	Peak() float64
}

// Constant is a fixed rate.
type Constant float64

func (c Constant) Rate(time.Duration) float64 { return float64(c) }
func (c Constant) Peak() float64              { return float64(c) }

// RatePoint is a rate at a time.
type RatePoint struct {
	At   time.Duration
	Rate float64
}

// Ramp is a piecewise linear rate through its points (in time order); it
// holds the first rate before the first point and the last after the last.
type Ramp []RatePoint

func (r Ramp) Rate(t time.Duration) float64 {
	if len(r) == 0 {
		return 0
	}
	if t <= r[0].At {
		return r[0].Rate
	}
	for i := 1; i < len(r); i++ {
		if t <= r[i].At {
			a, b := r[i-1], r[i]
			f := float64(t-a.At) / float64(b.At-a.At)
			return a.Rate + f*(b.Rate-a.Rate)
		}
	}
	return r[len(r)-1].Rate
}

func (r Ramp) Peak() float64 {
	p := 0.0
	for _, pt := range r {
		p = max(p, pt.Rate)
	}
	return p
}

// Burst is a base rate with a burst of Peak req/s for Length at the start
// of every period Every (the first burst after one period).
type Burst struct {
	Base, High    float64
	Every, Length time.Duration
}

func (b Burst) Rate(t time.Duration) float64 {
	if b.Every > 0 && t >= b.Every && t%b.Every < b.Length {
		return b.High
	}
	return b.Base
}

func (b Burst) Peak() float64 { return max(b.Base, b.High) }

// ZipfWeights are the weights 1/rank^s of n ranks (s = 0: uniform), the
// skewed popularity of functions and models in serverless traces.
func ZipfWeights(n int, s float64) []float64 {
	w := make([]float64, n)
	for i := range w {
		w[i] = 1 / math.Pow(float64(i+1), s)
	}
	return w
}

// Generator makes a workload from a rate shape and a mix of functions.
type Generator struct {
	Name      string
	Functions []Function
	// Weights is each function's share of the requests (nil: equal).
	Weights []float64
	// ModelSkew is the Zipf exponent of the models of a multi-model
	// function, most requested first (0: uniform).
	ModelSkew float64
	Shape     Shape
	// Poisson draws exponential inter-arrival times (thinned for a
	// changing rate) and random functions and models; otherwise arrivals
	// are evenly spaced and functions and models go in exact proportion
	// (smooth weighted round robin), which tests can compute by hand.
	Poisson  bool
	Duration time.Duration
	Seed     uint64
}

// maxGenerated bounds a generated workload (16 bytes a request).
const maxGenerated = 50_000_000

// Workload generates the requests.
func (g Generator) Workload() (*Workload, error) {
	if g.Duration <= 0 {
		return nil, errors.New("generator: duration must be positive")
	}
	if g.Shape == nil || g.Shape.Peak() <= 0 {
		return nil, errors.New("generator: the rate must be positive somewhere")
	}
	if len(g.Functions) == 0 {
		return nil, errors.New("generator: no functions")
	}
	if g.Weights != nil && len(g.Weights) != len(g.Functions) {
		return nil, fmt.Errorf("generator: %d weights for %d functions", len(g.Weights), len(g.Functions))
	}
	if exp := g.Shape.Peak() * g.Duration.Seconds(); exp > maxGenerated {
		return nil, fmt.Errorf("generator: up to %.0f requests, more than %d", exp, maxGenerated)
	}
	w := &Workload{Name: g.Name, Functions: slices.Clone(g.Functions), Duration: g.Duration}
	index := map[string]int32{}
	model := func(m string) int32 {
		if i, ok := index[m]; ok {
			return i
		}
		index[m] = int32(len(w.Models))
		w.Models = append(w.Models, m)
		return index[m]
	}
	// per function: its model indexes and a picker over them
	fnModels := make([][]int32, len(w.Functions))
	modelPick := make([]*picker, len(w.Functions))
	rng := rand.New(rand.NewPCG(g.Seed, g.Seed^0x9e3779b97f4a7c15))
	for i, f := range w.Functions {
		if f.MultiModel() {
			for _, m := range f.Models {
				fnModels[i] = append(fnModels[i], model(m))
			}
			modelPick[i] = newPicker(ZipfWeights(len(f.Models), g.ModelSkew), rng, !g.Poisson)
		} else {
			fnModels[i] = []int32{model(f.Model)}
		}
	}
	weights := g.Weights
	if weights == nil {
		weights = ZipfWeights(len(w.Functions), 0)
	}
	fnPick := newPicker(weights, rng, !g.Poisson)
	peak := g.Shape.Peak()
	t := time.Duration(0)
	for {
		if g.Poisson {
			t += time.Duration(rng.ExpFloat64() / peak * float64(time.Second))
			if t >= g.Duration {
				break
			}
			if rng.Float64()*peak >= g.Shape.Rate(t) {
				continue
			}
		} else if t >= g.Duration {
			break
		}
		fi := fnPick.next()
		mi := fnModels[fi][0]
		if modelPick[fi] != nil {
			mi = fnModels[fi][modelPick[fi].next()]
		}
		w.Arrivals = append(w.Arrivals, Arrival{At: t, Fn: int32(fi), Model: mi})
		if !g.Poisson {
			t = nextEven(g.Shape, t)
		}
	}
	w.canonicalize()
	return w, w.Validate()
}

// nextEven is the next evenly spaced arrival after one at t: 1/rate later,
// or, where the rate is zero, the next millisecond it is not.
func nextEven(s Shape, t time.Duration) time.Duration {
	for r := s.Rate(t); r <= 0; r = s.Rate(t) {
		t += time.Millisecond
	}
	return t + time.Duration(float64(time.Second)/s.Rate(t))
}

// picker chooses an index in proportion to weights: at random, or by
// smooth weighted round robin (every prefix of the sequence is as close to
// the proportions as whole numbers allow).
type picker struct {
	w, cum  []float64
	current []float64
	total   float64
	rng     *rand.Rand
	even    bool
}

func newPicker(w []float64, rng *rand.Rand, even bool) *picker {
	p := &picker{w: w, cum: make([]float64, len(w)), current: make([]float64, len(w)), rng: rng, even: even}
	for i, x := range w {
		p.total += x
		p.cum[i] = p.total
	}
	return p
}

func (p *picker) next() int {
	if len(p.w) == 1 {
		return 0
	}
	if !p.even {
		u := p.rng.Float64() * p.total
		i, _ := slices.BinarySearch(p.cum, u)
		return min(i, len(p.w)-1)
	}
	best := 0
	for i, x := range p.w {
		p.current[i] += x
		if p.current[i] > p.current[best] {
			best = i
		}
	}
	p.current[best] -= p.total
	return best
}
