package sim

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
)

// Spec describes a whole run in plain values: the workload (a trace file or
// a generator), the cluster, the policies and the options. The published
// scenarios are Specs, and every flag of faas-gpu simulate sets one field,
// so a scenario with flags on top is still one Spec.
type Spec struct {
	Name string

	// Trace replays a trace file (TraceHeader); the generator fields are
	// then unused.
	Trace string
	// Models the generator's functions serve (see ResolveModels).
	Models []string
	// Functions is how many functions, each one model, cycling through
	// Models (0: one per model).
	Functions int
	// MultiModel deploys one function, "zoo", serving every model (X-Model).
	MultiModel bool
	// Zipf skews the functions' shares (or, for a multi-model function,
	// its models'), most popular first: weight 1/rank^Zipf.
	Zipf float64
	// Poisson arrivals (else evenly spaced).
	Poisson bool
	// Rate is the total offered rate (req/s); Ramp, if set, replaces it by
	// a piecewise linear one; BurstRate > 0 adds bursts to it.
	Rate                    float64
	Ramp                    Ramp
	BurstRate               float64
	BurstEvery, BurstLength time.Duration
	Duration                time.Duration
	Seed                    uint64

	// Functions' settings. SLOFactor sets each SLO to that multiple of its
	// model's batch-1 latency on a whole GPU; SLO, if set, wins.
	SLO         time.Duration
	SLOFactor   float64
	SMPercent   int
	MemoryBytes int64
	Min, Max    int

	// Cluster: Inventory (a file) or GPUs V100s, PerNode to a node.
	Inventory string
	GPUs      int
	PerNode   int

	Policies []string
	Options  Options
}

// ResolveModels expands model selectors against the 69 torchvision
// models of the profiles: a name, name*N (N functions of it), "all",
// "largest:N" or "smallest:N" (by GPU footprint), "spread:N" (N evenly
// spaced in name order). Repeats are kept: each entry is one function.
func ResolveModels(sel []string) ([]string, error) {
	tv := profiles.TorchvisionModels()
	size := func(name string) int64 {
		m, _ := profiles.LookupTorchvision(name)
		return profiles.EstimateFootprint(m.Params).ModelSizeBytes
	}
	names := make([]string, len(tv))
	for i, m := range tv {
		names[i] = m.Name
	}
	var out []string
	for _, s := range sel {
		kind, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
		n := 0
		if hasArg {
			v, err := strconv.Atoi(arg)
			if err != nil || v < 1 || v > len(names) {
				return nil, fmt.Errorf("models: %q: want %s:N with N in 1-%d", s, kind, len(names))
			}
			n = v
		}
		switch {
		case kind == "all" && !hasArg:
			out = append(out, names...)
		case kind == "largest" || kind == "smallest":
			bySize := slices.Clone(names)
			slices.SortStableFunc(bySize, func(a, b string) int {
				d := size(a) - size(b)
				if kind == "largest" {
					d = -d
				}
				switch {
				case d < 0:
					return -1
				case d > 0:
					return 1
				}
				return strings.Compare(a, b)
			})
			out = append(out, bySize[:n]...)
		case kind == "spread":
			for i := range n {
				out = append(out, names[i*len(names)/n])
			}
		case !hasArg && modelName.MatchString(kind):
			out = append(out, kind)
		case !hasArg && strings.Contains(kind, "*"):
			name, count, _ := strings.Cut(kind, "*")
			c, err := strconv.Atoi(count)
			if err != nil || c < 1 || !modelName.MatchString(name) {
				return nil, fmt.Errorf("models: %q: want name*N with N at least 1", s)
			}
			for range c {
				out = append(out, name)
			}
		default:
			return nil, fmt.Errorf("models: %q is not a model name, all, largest:N, smallest:N or spread:N", s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("models: none given")
	}
	return out, nil
}

func dedup(ms []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}

// Cluster builds the inventory the spec describes.
func (s *Spec) Cluster() (gpu.Inventory, error) {
	if s.Inventory != "" {
		return gpu.LoadInventoryFile(s.Inventory)
	}
	return V100Inventory(s.GPUs, max(s.PerNode, 1))
}

// ProfileModels lists the models whose profiles the run needs (nil: all
// of them, for a trace, whose models are known only once it is read).
func (s *Spec) ProfileModels() ([]string, error) {
	if s.Trace != "" {
		return nil, nil
	}
	ms, err := ResolveModels(s.Models)
	return dedup(ms), err
}

// Workload builds the spec's workload; SLO factors read the catalog.
func (s *Spec) Workload(cat *Catalog, product string) (*Workload, error) {
	if s.Trace != "" {
		f, err := os.Open(s.Trace)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		defer f.Close()
		w, err := ReadTrace(f, TraceOptions{Name: s.Name, SLO: s.SLO, SMPercent: s.SMPercent, MemoryBytes: s.MemoryBytes, Min: s.Min, Max: s.Max, Duration: s.Duration})
		if err != nil {
			return nil, fmt.Errorf("trace %s: %w", s.Trace, err)
		}
		if s.SLO == 0 && s.SLOFactor > 0 {
			for i := range w.Functions {
				if w.Functions[i].SLO, err = s.sloFor(cat, product, w.Functions[i].Model); err != nil {
					return nil, err
				}
			}
		}
		return w, nil
	}
	models, err := ResolveModels(s.Models)
	if err != nil {
		return nil, err
	}
	g := Generator{Name: s.Name, Poisson: s.Poisson, Duration: s.Duration, Seed: s.Seed}
	switch {
	case len(s.Ramp) > 0:
		g.Shape = s.Ramp
	case s.BurstRate > 0:
		g.Shape = Burst{Base: s.Rate, High: s.BurstRate, Every: s.BurstEvery, Length: s.BurstLength}
	default:
		g.Shape = Constant(s.Rate)
	}
	fn := func(name, model string) (Function, error) {
		f := Function{Name: name, Model: model, SMPercent: s.SMPercent, MemoryBytes: s.MemoryBytes, Min: s.Min, Max: s.Max}
		var err error
		f.SLO, err = s.sloFor(cat, product, model)
		return f, err
	}
	if s.MultiModel {
		models = dedup(models)
		f, err := fn("zoo", models[0])
		if err != nil {
			return nil, err
		}
		if len(models) > 1 {
			f.Models = models
		}
		g.Functions = []Function{f}
		g.ModelSkew = s.Zipf
	} else {
		n := s.Functions
		if n <= 0 {
			n = len(models)
		}
		numbered := n > len(dedup(models))
		for i := range n {
			m := models[i%len(models)]
			f, err := fn(functionNameFor(m, i, numbered), m)
			if err != nil {
				return nil, err
			}
			g.Functions = append(g.Functions, f)
		}
		g.Weights = ZipfWeights(n, s.Zipf)
	}
	return g.Workload()
}

// functionNameFor is a valid function name for model (models have '_').
func functionNameFor(model string, i int, numbered bool) string {
	name := strings.ToLower(strings.ReplaceAll(model, "_", "-"))
	if numbered {
		name = fmt.Sprintf("%s-%d", name, i)
	}
	return name
}

func (s *Spec) sloFor(cat *Catalog, product, model string) (time.Duration, error) {
	if s.SLO > 0 || s.SLOFactor <= 0 {
		return s.SLO, nil
	}
	m, err := cat.model(model, product)
	if err != nil {
		return 0, err
	}
	// Whole milliseconds, rounded up: SLOs read like annotations.
	return time.Duration(math.Ceil(s.SLOFactor*float64(m.fullLat)/float64(time.Millisecond))) * time.Millisecond, nil
}

// ParseRamp reads "T:R,T:R,..." (a Go duration or seconds, then req/s).
func ParseRamp(s string) (Ramp, error) {
	var r Ramp
	for _, part := range strings.Split(s, ",") {
		ts, rs, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("ramp: %q: want time:rate", part)
		}
		t, err := time.ParseDuration(ts)
		if err != nil {
			sec, err2 := strconv.ParseFloat(ts, 64)
			if err2 != nil {
				return nil, fmt.Errorf("ramp: %q: time %q is not a duration", part, ts)
			}
			t = time.Duration(sec * float64(time.Second))
		}
		rate, err := strconv.ParseFloat(rs, 64)
		if err != nil || rate < 0 {
			return nil, fmt.Errorf("ramp: %q: rate %q is not a number ≥ 0", part, rs)
		}
		if len(r) > 0 && t <= r[len(r)-1].At {
			return nil, fmt.Errorf("ramp: %q: times must increase", part)
		}
		r = append(r, RatePoint{At: t, Rate: rate})
	}
	return r, nil
}

// String writes a ramp the way ParseRamp reads it.
func (r Ramp) String() string {
	parts := make([]string, len(r))
	for i, p := range r {
		parts[i] = p.At.String() + ":" + strconv.FormatFloat(p.Rate, 'f', -1, 64)
	}
	return strings.Join(parts, ",")
}
