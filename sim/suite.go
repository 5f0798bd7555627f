package sim

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The held-out suite (issue 12, point 5): workloads the project did not
// publish, fixed before any tuning of the autoscaler or the plan so that
// the figures measured on them say how faas-gpu does on the workload
// family rather than on the runs it was shaped on. They may be added to,
// never changed: a changed workload would hide a regression behind a new
// "before".
//
// Each varies one or more of: the model mix (5 to 60 models, light and
// heavy), the popularity skew (Zipf 0 to 1.5), the load level (x0.5 to
// x2 of a base), the SLO factor (2 to 10), the arrivals (steps, bursts,
// diurnal, on/off) and the cold start (container start 3 to 30 s, before
// the model's own load time). Every workload runs on enough V100s and
// replicas that neither the cluster nor com.openfaas.scale.max is what
// limits a policy: violations then come from the decisions alone.
//
// The first minute is left out of the request metrics (a function is
// deployed before its traffic); the load changes only after it.

// suiteWarmup is left out of every held-out workload's request metrics.
const suiteWarmup = time.Minute

// heldOut is the suite; its order is the table's.
func heldOut() []scenario {
	// base builds the fields every workload shares.
	base := func(name string, models []string, zipf float64, slo float64, cold time.Duration) Spec {
		return Spec{Name: name, Models: models, Zipf: zipf, Poisson: true, Seed: 12, SLOFactor: slo,
			Max: 200, GPUs: 64, PerNode: 8, Duration: 10 * time.Minute,
			Options: Options{Warmup: suiteWarmup, ContainerStart: cold}}
	}
	with := func(s Spec, f func(*Spec)) Spec { f(&s); return s }
	return []scenario{
		{"h01-light5", "5 light models, uniform, 150 req/s steady, SLO x4, cold 3 s", func() Spec {
			return with(base("h01-light5", []string{"smallest:5"}, 0, 4, 3*time.Second), func(s *Spec) { s.Rate = 150 })
		}},
		{"h02-heavy5", "5 heavy models, Zipf 0.5, 40 req/s steady, SLO x3, cold 5 s", func() Spec {
			return with(base("h02-heavy5", []string{"largest:5"}, 0.5, 3, 5*time.Second), func(s *Spec) { s.Rate = 40 })
		}},
		{"h03-mix10-half", "another 10-model mix (light to heavy), Zipf 1.0, x0.5 load (100 req/s), SLO x3.5, cold 3 s", func() Spec {
			return with(base("h03-mix10-half", mix10, 1.0, 3.5, 3*time.Second), func(s *Spec) { s.Rate = 100 })
		}},
		{"h04-mix10-double", "the same mix at x2 load (400 req/s), Zipf 1.0, SLO x3.5, cold 3 s", func() Spec {
			return with(base("h04-mix10-double", mix10, 1.0, 3.5, 3*time.Second), func(s *Spec) { s.Rate = 400 })
		}},
		{"h05-mix10-slo2", "the same mix at x1 (200 req/s), SLO x2, Zipf 1.0, cold 3 s", func() Spec {
			return with(base("h05-mix10-slo2", mix10, 1.0, 2, 3*time.Second), func(s *Spec) { s.Rate = 200 })
		}},
		{"h06-spread20-slo10", "20 models (spread), Zipf 0.8, 300 req/s, SLO x10, cold 3 s", func() Spec {
			return with(base("h06-spread20-slo10", []string{"spread:20"}, 0.8, 10, 3*time.Second), func(s *Spec) { s.Rate = 300 })
		}},
		{"h07-all35-uniform", "35 models (every other one), uniform popularity, 350 req/s, SLO x3.5, cold 3 s", func() Spec {
			return with(base("h07-all35-uniform", []string{"spread:35"}, 0, 3.5, 3*time.Second), func(s *Spec) { s.Rate = 350 })
		}},
		{"h08-all60-zipf15", "60 models, Zipf 1.5, 600 req/s, SLO x3, cold 5 s", func() Spec {
			return with(base("h08-all60-zipf15", []string{"spread:60"}, 1.5, 3, 5*time.Second), func(s *Spec) { s.Rate = 600 })
		}},
		{"h09-steps", "10-model mix, Zipf 1.0, steps 50 -> 400 -> 100 -> 300 req/s (each held 2 min), SLO x3.5, cold 3 s", func() Spec {
			return with(base("h09-steps", mix10, 1.0, 3.5, 3*time.Second), func(s *Spec) { s.Ramp = steps(suiteWarmup, 2*time.Minute, 50, 400, 100, 300) })
		}},
		{"h10-bursts20s", "10-model mix, Zipf 0.5, 100 req/s with 20 s bursts of +400 every 2 min, SLO x3.5, cold 3 s", func() Spec {
			return with(base("h10-bursts20s", mix10, 0.5, 3.5, 3*time.Second), func(s *Spec) {
				s.Rate, s.BurstRate, s.BurstEvery, s.BurstLength = 100, 400, 2*time.Minute, 20*time.Second
			})
		}},
		{"h11-diurnal", "20 models (spread), Zipf 1.0, a day compressed to 20 min: 40 -> 500 -> 40 req/s, SLO x3.5, cold 5 s", func() Spec {
			return with(base("h11-diurnal", []string{"spread:20"}, 1.0, 3.5, 5*time.Second), func(s *Spec) {
				s.Duration = 20 * time.Minute
				s.Ramp = diurnal(s.Duration, 40, 500, 30*time.Second)
			})
		}},
		{"h12-onoff", "10-model mix, Zipf 1.0, on/off trace: 300 req/s on, 0 off, periods 5-60 s at random, SLO x3.5, cold 3 s", func() Spec {
			return with(base("h12-onoff", mix10, 1.0, 3.5, 3*time.Second), func(s *Spec) { s.Ramp = onOff(s.Duration, 300, 5*time.Second, time.Minute, 12) })
		}},
		{"h13-cold30-step", "10-model mix, Zipf 1.0, step 100 -> 300 req/s, cold 30 s, SLO x3.5", func() Spec {
			return with(base("h13-cold30-step", mix10, 1.0, 3.5, 30*time.Second), func(s *Spec) { s.Ramp = steps(2*time.Minute, 4*time.Minute, 100, 300) })
		}},
		{"h14-resnet50-200", "one function, resnet50, 200 req/s steady (the issue's example), SLO x3.5, cold 3 s", func() Spec {
			return with(base("h14-resnet50-200", []string{"resnet50"}, 0, 3.5, 3*time.Second), func(s *Spec) { s.Rate = 200 })
		}},
		{"h15-light-load", "8 functions (4 light, 2 medium, 2 heavy), 2 req/s each, SLO x3.5, cold 3 s: how few GPUs at light load", func() Spec {
			return with(base("h15-light-load", []string{"mobilenet_v2*2", "resnet18*2", "densenet121*2", "vgg16*2"}, 0, 3.5, 3*time.Second), func(s *Spec) { s.Rate = 16 })
		}},
		{"h16-zoo20-bursts", "one function serving 20 models (X-Model), Zipf 0.8, 60 req/s with 20 s bursts of +120 every 90 s, SLO 300 ms (an SLO factor of its first model, alexnet, no other could meet), cold 10 s", func() Spec {
			return with(base("h16-zoo20-bursts", []string{"spread:20"}, 0.8, 5, 10*time.Second), func(s *Spec) {
				// As the locality run: a replica holds the GPU's memory, so that many
				// models stay resident in it.
				s.MultiModel, s.SLO, s.MemoryBytes, s.Max = true, 300*time.Millisecond, 16<<30, 16
				s.Rate, s.BurstRate, s.BurstEvery, s.BurstLength = 60, 120, 90*time.Second, 20*time.Second
			})
		}},
		{"h17-heavy15-double-slo2.5", "15 models (largest), Zipf 0.3, 160 req/s (x2), SLO x2.5, cold 10 s", func() Spec {
			return with(base("h17-heavy15-double-slo2.5", []string{"largest:15"}, 0.3, 2.5, 10*time.Second), func(s *Spec) { s.Rate = 160 })
		}},
		{"h18-mix10-skew0-x1.5-slo6", "the 10-model mix uniform, 300 req/s (x1.5), SLO x6, cold 20 s, with one 3-min step to 450", func() Spec {
			return with(base("h18-mix10-skew0-x1.5-slo6", mix10, 0, 6, 20*time.Second), func(s *Spec) { s.Ramp = steps(3*time.Minute, 3*time.Minute, 300, 450, 300) })
		}},
		{"h19-zoo8-steady", "one function serving 8 models (X-Model, spread), Zipf 1.0, 120 req/s steady, SLO 250 ms (x5 its slowest model's, efficientnet_v2_l; a factor of its first, alexnet, no other could meet), 8 GiB replicas, cold 5 s", func() Spec {
			return with(base("h19-zoo8-steady", []string{"spread:8"}, 1.0, 5, 5*time.Second), func(s *Spec) {
				s.MultiModel, s.SLO, s.MemoryBytes, s.Max = true, 250*time.Millisecond, 8<<30, 16
				s.Rate = 120
			})
		}},
	}
}

// mix10 is a 10-model mix other than the cost run's spread:10: light
// (mobilenet, shufflenet, squeezenet), medium (resnet, efficientnet,
// regnet) and heavy (vgg19_bn, convnext_large, wide_resnet101_2).
var mix10 = []string{"mobilenet_v3_large", "shufflenet_v2_x1_0", "squeezenet1_1", "resnet34", "efficientnet_b2",
	"regnet_y_3_2gf", "resnext50_32x4d", "vgg19_bn", "convnext_large", "wide_resnet101_2"}

// steps holds each rate for hold, the first from time 0 to first, with
// 100 ms edges (a ramp needs increasing times).
func steps(first, hold time.Duration, rates ...float64) Ramp {
	r := Ramp{{0, rates[0]}}
	at := first
	for i := 1; i < len(rates); i++ {
		r = append(r, RatePoint{at, rates[i-1]}, RatePoint{at + 100*time.Millisecond, rates[i]})
		at += hold
	}
	return r
}

// diurnal is one sinusoidal day over d, low at both ends and high in the
// middle, sampled every step.
func diurnal(d time.Duration, low, high float64, step time.Duration) Ramp {
	var r Ramp
	for t := time.Duration(0); t <= d; t += step {
		phase := 2 * math.Pi * t.Seconds() / d.Seconds()
		r = append(r, RatePoint{t, low + (high-low)*(1-math.Cos(phase))/2})
	}
	return r
}

// onOff is an on/off trace over d: on at rate, off at 0, each period
// drawn uniformly in [shortest, longest] from seed; on through the
// warm-up so that the functions have their replicas when the trace
// starts switching.
func onOff(d time.Duration, rate float64, shortest, longest time.Duration, seed uint64) Ramp {
	rng := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	r := Ramp{{0, rate}}
	on := true
	for at := suiteWarmup; at < d; {
		next := 0.0
		if !on {
			next = rate
		}
		r = append(r, RatePoint{at, r[len(r)-1].Rate}, RatePoint{at + 100*time.Millisecond, next})
		on = !on
		at += shortest + time.Duration(rng.Int64N(int64(longest-shortest)))
	}
	return r
}

// Suites lists the workload suites -suite runs.
func Suites() []string {
	out := []string{"heldout"}
	for _, d := range familyDraws {
		out = append(out, d.suite)
	}
	for _, d := range zooDraws {
		out = append(out, d.suite)
	}
	return out
}

// SuiteWorkloads lists a suite's workloads: name and what it varies.
func SuiteWorkloads(suite string) ([][2]string, error) {
	sc, err := lookupSuite(suite)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, len(sc))
	for i, s := range sc {
		out[i] = [2]string{s.name, s.about}
	}
	return out, nil
}

// lookupSuite reads "SUITE" (every workload) or "SUITE/PREFIX" (those
// whose name starts with PREFIX, to rerun one).
func lookupSuite(sel string) ([]scenario, error) {
	name, prefix, _ := strings.Cut(sel, "/")
	var all []scenario
	named := func(d familyDraw) bool { return d.suite == name }
	i, z := slices.IndexFunc(familyDraws, named), slices.IndexFunc(zooDraws, named)
	var err error
	switch {
	case name == "heldout":
		all = heldOut()
	case i >= 0:
		all, err = family(familyDraws[i].seed, familyDraws[i].prefix)
	case z >= 0:
		all, err = zoo(zooDraws[z].seed, zooDraws[z].prefix)
	default:
		return nil, fmt.Errorf("unknown suite %q (known: %s)", name, strings.Join(Suites(), ", "))
	}
	if err != nil {
		return nil, err
	}
	var out []scenario
	for _, s := range all {
		if strings.HasPrefix(s.name, prefix) {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("suite %s has no workload named %s...", name, prefix)
	}
	return out, nil
}

// SuiteSpecs is every workload of a suite (SUITE, or SUITE/PREFIX for
// some) with the flags given on the
// command line applied on top (-contention off, -policies, -warm-ttl...),
// as -scenario takes them. Without -policies a suite runs faas-gpu and
// fast-gshare, the policy under test and the strongest baseline; the LB
// family and time sharing are far from the bound on every run published.
func (f *SpecFlags) SuiteSpecs(suite string) ([]Spec, []string, error) {
	if f.scenario != "" {
		return nil, nil, fmt.Errorf("-suite: give -scenario or -suite, not both")
	}
	sc, err := lookupSuite(suite)
	if err != nil {
		return nil, nil, fmt.Errorf("-suite: %w", err)
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	for _, n := range []string{"trace", "models", "name", "functions", "multi-model", "rate", "ramp", "duration", "zipf", "slo", "slo-factor"} {
		if given[n] {
			return nil, nil, fmt.Errorf("-%s: a suite's workloads are fixed; pick one with -suite SUITE/NAME", n)
		}
	}
	var specs []Spec
	var abouts []string
	for _, s := range sc {
		sp := s.spec()
		sp.Policies = []string{"faas-gpu", "fast-gshare"}
		if err := sp.applyFlags(f, func(name string) bool { return given[name] }); err != nil {
			return nil, nil, err
		}
		if err := sp.validate(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", s.name, err)
		}
		specs = append(specs, sp)
		abouts = append(abouts, s.about)
	}
	return specs, abouts, nil
}
