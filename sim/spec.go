package sim

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"k8s.io/apimachinery/pkg/api/resource"
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
	// model's batch-1 latency on a whole GPU (a multi-model function's
	// slowest model's, so that every model it serves can meet it); SLO,
	// if set, wins.
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
	// Contention names the contention model (-contention): a contention
	// file, "builtin" or "off"; empty is builtin. Options.Contention is
	// what a run uses; ContentionModel reads this into it.
	Contention string
}

// ContentionModel is the contention model the spec names (nil: off).
func (s *Spec) ContentionModel() (*Contention, error) {
	if s.Contention == "" {
		return DefaultContention(), nil
	}
	return LoadContention(s.Contention)
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
		// BurstRate comes on top of the base rate, as -burst-rate says.
		g.Shape = Burst{Base: s.Rate, High: s.Rate + s.BurstRate, Every: s.BurstEvery, Length: s.BurstLength}
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
		for _, m := range models[1:] {
			slo, err := s.sloFor(cat, product, m)
			if err != nil {
				return nil, err
			}
			f.SLO = max(f.SLO, slo)
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

// firstBurstDrain extends the first burst's window past its end by the
// time its backlog takes to drain: the requests arriving then wait behind
// the burst's, not for anything of their own.
const firstBurstDrain = 20 * time.Second

// FirstBurst is the window of arrivals that the first of the workload's
// bursts touches, from its onset to firstBurstDrain after its end; ok is
// false when the load has no bursts (a trace, a ramp or a constant rate).
// The first burst is the one a policy cannot see coming: what a run
// misses outside it is what learning the bursts can still save.
func (s *Spec) FirstBurst() (from, to time.Duration, ok bool) {
	if s.Trace != "" || len(s.Ramp) > 0 || s.BurstRate <= 0 {
		return 0, 0, false
	}
	return s.BurstEvery, s.BurstEvery + s.BurstLength + firstBurstDrain, true
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

// SpecFlags are the command-line flags that describe a run: -scenario
// picks a published Spec, and every other flag, when given, overrides one
// part of it. Each flag is registered beside what it does to the Spec, so
// a flag, its help and its effect cannot drift apart.
type SpecFlags struct {
	fs        *flag.FlagSet
	scenario  string
	overrides []specOverride
}

// specOverride is one flag's effect on a Spec.
type specOverride struct {
	name  string
	apply func(*Spec) error
}

// baseFlag reports whether the flag's value makes part of the Spec of a
// run without -scenario even when not given: its default is then the
// run's value.
func baseFlag(name string) bool {
	switch name {
	case "process", "rate", "burst-every", "burst-length", "duration", "seed", "gpus", "gpus-per-node", "policies":
		return true
	}
	return false
}

// RegisterSpecFlags adds the run's flags to fs; Spec reads them after
// fs.Parse.
func RegisterSpecFlags(fs *flag.FlagSet) *SpecFlags {
	f := &SpecFlags{fs: fs}
	fs.StringVar(&f.scenario, "scenario", "", "a published run: "+strings.Join(ScenarioNames(), ", "))
	// The overrides apply in registration order, which carries the
	// interactions: -trace before -duration (a trace resets the duration
	// unless -duration is given), -rate before -ramp (a rate drops the
	// scenario's ramp), -inventory before -gpus (-gpus drops the file).
	f.str("trace", "", "trace file to replay (header "+TraceHeader+")", func(s *Spec, v string) error {
		s.Trace, s.Models, s.Name = v, nil, strings.TrimSuffix(filepath.Base(v), filepath.Ext(v))
		s.Duration = 0
		return nil
	})
	f.str("models", "", "models, one function each: names, name*N (N functions), all, largest:N, smallest:N, spread:N", func(s *Spec, v string) error {
		s.Models = strings.Split(v, ",")
		return nil
	})
	f.str("name", "", "name of the run in -out's file names (default: the scenario's, the trace's, or run)", func(s *Spec, v string) error {
		if !ValidRunName(v) {
			return fmt.Errorf("-name: %q must be letters, digits, '.', '_' or '-'", v)
		}
		s.Name = v
		return nil
	})
	f.integer("functions", 0, "number of functions, cycling through -models (0: one per model)", func(s *Spec, v int) error {
		s.Functions = v
		return nil
	})
	f.boolean("multi-model", false, "one function, zoo, serving every model of -models (requests carry X-Model)", func(s *Spec, v bool) error {
		s.MultiModel = v
		return nil
	})
	f.float("zipf", 0, "Zipf exponent of the functions' shares (of the models' with -multi-model); 0: equal", func(s *Spec, v float64) error {
		s.Zipf = v
		return nil
	})
	f.str("process", "poisson", "arrivals: poisson, or even (evenly spaced)", func(s *Spec, v string) error {
		switch v {
		case "poisson":
			s.Poisson = true
		case "even":
			s.Poisson = false
		default:
			return fmt.Errorf("-process: %q is not poisson or even", v)
		}
		return nil
	})
	f.float("rate", 10, "total offered load, requests/s", func(s *Spec, v float64) error {
		s.Rate, s.Ramp = v, nil
		return nil
	})
	f.str("ramp", "", "piecewise linear load instead of -rate: time:rate,... (e.g. 0s:20,90s:110,180s:20)", func(s *Spec, v string) error {
		r, err := ParseRamp(v)
		if err != nil {
			return fmt.Errorf("-ramp: %w", err)
		}
		s.Ramp = r
		return nil
	})
	every := f.duration("burst-every", time.Minute, "period of the bursts", func(s *Spec, v time.Duration) error {
		if v <= 0 {
			return fmt.Errorf("-burst-every: %s must be positive", v)
		}
		s.BurstEvery = v
		return nil
	})
	length := f.duration("burst-length", 10*time.Second, "length of a burst", func(s *Spec, v time.Duration) error {
		if v <= 0 {
			return fmt.Errorf("-burst-length: %s must be positive", v)
		}
		s.BurstLength = v
		return nil
	})
	f.float("burst-rate", 0, "load during bursts (requests/s) on top of -rate's base", func(s *Spec, v float64) error {
		if v < 0 {
			return fmt.Errorf("-burst-rate: %v must be 0 (no bursts) or more", v)
		}
		s.BurstRate = v
		// A scenario without bursts has no period: the flags' defaults give one.
		if s.BurstEvery <= 0 {
			s.BurstEvery = *every
		}
		if s.BurstLength <= 0 {
			s.BurstLength = *length
		}
		return nil
	})
	f.duration("duration", time.Minute, "length of the offered load (with -trace: 0 reads it off the trace)", func(s *Spec, v time.Duration) error {
		s.Duration = v
		return nil
	})
	f.uint64("seed", 1, "random seed of the workload: a seed gives the same run every time", func(s *Spec, v uint64) error {
		s.Seed = v
		return nil
	})
	f.duration("slo", 0, "latency SLO of every function (com.openfaas.gpu.slo)", func(s *Spec, v time.Duration) error {
		s.SLO = v
		return nil
	})
	f.float("slo-factor", 0, "SLO of each function: this multiple of its model's batch-1 latency on a whole GPU (with -multi-model, its slowest model's)", func(s *Spec, v float64) error {
		s.SLOFactor = v
		return nil
	})
	f.integer("sm", 0, "SM % of every replica (com.openfaas.gpu.sm); 0: the policy chooses", func(s *Spec, v int) error {
		if v < 0 || v > 100 {
			return fmt.Errorf("-sm: %d is outside 0-100", v)
		}
		s.SMPercent = v
		return nil
	})
	f.str("memory", "", "GPU memory of every replica (com.openfaas.gpu.memory), e.g. 4Gi; empty: from the profile", func(s *Spec, v string) error {
		q, err := resource.ParseQuantity(v)
		if err != nil || q.Value() <= 0 {
			return fmt.Errorf("-memory: %q is not a positive quantity such as 4Gi", v)
		}
		s.MemoryBytes = q.Value()
		return nil
	})
	f.integer("min", 0, "replicas at least (com.openfaas.scale.min; 0: 1)", func(s *Spec, v int) error {
		if v < 0 {
			return fmt.Errorf("-min: %d must be 0 or more", v)
		}
		s.Min = v
		return nil
	})
	f.integer("max", 0, "replicas at most (com.openfaas.scale.max; 0: 20)", func(s *Spec, v int) error {
		if v < 0 {
			return fmt.Errorf("-max: %d must be 0 (the default of 20) or more", v)
		}
		s.Max = v
		return nil
	})
	f.str("inventory", "", "GPU inventory file (docs/inventory.md) instead of -gpus", func(s *Spec, v string) error {
		s.Inventory = v
		return nil
	})
	f.integer("gpus", 4, "number of Tesla V100-SXM2-16GB", func(s *Spec, v int) error {
		s.GPUs, s.Inventory = v, ""
		return nil
	})
	f.integer("gpus-per-node", 8, "V100s per node", func(s *Spec, v int) error {
		if v < 1 {
			return fmt.Errorf("-gpus-per-node: %d must be at least 1", v)
		}
		s.PerNode = v
		return nil
	})
	f.str("policies", "all", "policies to compare, comma-separated: "+strings.Join(PolicyNames(), ", "), func(s *Spec, v string) error {
		p, err := ParsePolicies(v)
		if err != nil {
			return fmt.Errorf("-policies: %w", err)
		}
		s.Policies = p
		return nil
	})
	f.duration("warmup", 0, "leave requests arriving before this out of the request metrics", func(s *Spec, v time.Duration) error {
		s.Options.Warmup = v
		return nil
	})
	f.duration("drain", 5*time.Minute, "how long after the load requests may still finish", func(s *Spec, v time.Duration) error {
		s.Options.Drain = v
		return nil
	})
	f.float("slo-margin", 1, "faas-gpu and fast-gshare are given SLO x this as their SLO (faas-gpu then holds its batches to half of it, fast-gshare to all of it), up to 2 (faas-gpu's batches at the whole SLO); violations still count against the SLO", func(s *Spec, v float64) error {
		if v <= 0 || v > 2 {
			return fmt.Errorf("-slo-margin: %v is outside (0, 2]", v)
		}
		s.Options.SLOMargin = v
		return nil
	})
	f.integer("max-batch", 0, "cap every replica's batch size (0: none)", func(s *Spec, v int) error {
		if v < 0 {
			return fmt.Errorf("-max-batch: %d must be 0 (no cap) or more", v)
		}
		s.Options.MaxBatch = v
		return nil
	})
	f.float("fast-scale-up", 1, "fast-gshare and time-sharing scale up once the rate passes this share of their pods' profiled throughput (1: any gap; 0.9: HAS-GPU's ScaleUpThreshold, the most generous reading)", func(s *Spec, v float64) error {
		if v <= 0 || v > 1 {
			return fmt.Errorf("-fast-scale-up: %v must be in (0, 1]", v)
		}
		s.Options.FastScaleUp = v
		return nil
	})
	f.boolean("no-queueing", false, "faas-gpu's autoscaler plans against each replica's full-batch throughput with 20 % headroom, as before issue 12, not its queueing capacity at the SLO, and does not resize (scheduler.AutoscaleOptions.NoQueueing; an ablation)", func(s *Spec, v bool) error {
		if s.Options.Autoscale == (scheduler.AutoscaleOptions{}) {
			s.Options.Autoscale = scheduler.DefaultAutoscaleOptions
		}
		s.Options.Autoscale.NoQueueing = v
		return nil
	})
	f.boolean("no-backlog", false, "faas-gpu's autoscaler follows the rate alone, not told the requests waiting (an ablation)", func(s *Spec, v bool) error {
		s.Options.NoBacklog = v
		return nil
	})
	f.boolean("no-consolidate", false, "faas-gpu never moves a replica to free a GPU (lifecycle.Options.NoConsolidate; an ablation)", func(s *Spec, v bool) error {
		s.Options.NoConsolidate = v
		return nil
	})
	f.boolean("no-standby", false, "faas-gpu keeps no standby replicas (lifecycle.Options.NoStandby; an ablation, as serve -standby=false)", func(s *Spec, v bool) error {
		s.Options.NoStandby = v
		return nil
	})
	f.duration("container-start", 2*time.Second, "placement to process started, before the model loads", func(s *Spec, v time.Duration) error {
		s.Options.ContainerStart = v
		return nil
	})
	f.str("parked", "", "the com.openfaas.gpu.parked annotation of every function: processes faas-gpu keeps started ahead, off the GPU; a replica that takes one skips the container start. auto (the provider's default, as when not given): as many as each function's starts showed it needs; a count; 0: none", func(s *Spec, v string) error {
		if n, err := strconv.Atoi(v); v != scheduler.ParkedAuto && (err != nil || n < 0) {
			return fmt.Errorf("-parked: %q must be %q or a whole number, not negative", v, scheduler.ParkedAuto)
		}
		s.Options.Parked = v
		return nil
	})
	f.boolean("parked-held-gpus", false, "park as the Kubernetes backend's parked pods do (serve -k8s-parked): a parked process sees the GPUs of its node that held a booking when it was parked, and a replica placed on another GPU starts as if none was parked", func(s *Spec, v bool) error {
		s.Options.ParkedHeldGPUs = v
		return nil
	})
	f.integer("locality-bound", 2, "the provider's -locality-bound: requests waiting for a busy replica holding their model", func(s *Spec, v int) error {
		if v < 1 {
			return fmt.Errorf("-locality-bound: %d must be at least 1", v)
		}
		s.Options.LocalityBound = v
		return nil
	})
	f.duration("autoscale-interval", time.Second, "the provider's -autoscale-interval: how often faas-gpu's core ticks", func(s *Spec, v time.Duration) error {
		if v <= 0 {
			return fmt.Errorf("-autoscale-interval: %s must be positive", v)
		}
		s.Options.Tick = v
		return nil
	})
	f.duration("rise-interval", lifecycle.DefaultRise, "the provider's -rise-interval: how often faas-gpu's core looks for a rising rate between ticks (at or above -autoscale-interval: never)", func(s *Spec, v time.Duration) error {
		if v <= 0 {
			return fmt.Errorf("-rise-interval: %s must be positive", v)
		}
		s.Options.Rise = v
		return nil
	})
	f.duration("warm-ttl", 10*time.Minute, "the provider's -warm-ttl", func(s *Spec, v time.Duration) error {
		s.Options.WarmTTL = v
		return nil
	})
	f.str("contention", "builtin", "how replicas busy at once slow each other: a contention file ("+ContentionHeader+"; hack/gpu-check.sh writes one), builtin (calibrated on FaST-GShare's slide 17) or off (co-located slices never touch)", func(s *Spec, v string) error {
		if _, err := LoadContention(v); err != nil {
			return fmt.Errorf("-contention: %w", err)
		}
		s.Contention = v
		return nil
	})
	return f
}

func (f *SpecFlags) add(name string, apply func(*Spec) error) {
	f.overrides = append(f.overrides, specOverride{name: name, apply: apply})
}

func (f *SpecFlags) str(name, def, usage string, apply func(*Spec, string) error) {
	v := f.fs.String(name, def, usage)
	f.add(name, func(s *Spec) error { return apply(s, *v) })
}

func (f *SpecFlags) integer(name string, def int, usage string, apply func(*Spec, int) error) {
	v := f.fs.Int(name, def, usage)
	f.add(name, func(s *Spec) error { return apply(s, *v) })
}

func (f *SpecFlags) uint64(name string, def uint64, usage string, apply func(*Spec, uint64) error) {
	v := f.fs.Uint64(name, def, usage)
	f.add(name, func(s *Spec) error { return apply(s, *v) })
}

func (f *SpecFlags) float(name string, def float64, usage string, apply func(*Spec, float64) error) {
	v := f.fs.Float64(name, def, usage)
	f.add(name, func(s *Spec) error { return apply(s, *v) })
}

func (f *SpecFlags) boolean(name string, def bool, usage string, apply func(*Spec, bool) error) {
	v := f.fs.Bool(name, def, usage)
	f.add(name, func(s *Spec) error { return apply(s, *v) })
}

// duration returns the flag's value so that other flags' effects can
// read it.
func (f *SpecFlags) duration(name string, def time.Duration, usage string, apply func(*Spec, time.Duration) error) *time.Duration {
	v := f.fs.Duration(name, def, usage)
	f.add(name, func(s *Spec) error { return apply(s, *v) })
	return v
}

// Spec is the run the parsed flags describe: the -scenario's Spec (and
// what it measures), or without one the base flags' values, with every
// flag given on the command line applied on top.
func (f *SpecFlags) Spec() (Spec, string, error) {
	var s Spec
	about := ""
	if f.scenario != "" {
		var err error
		if s, about, err = Scenario(f.scenario); err != nil {
			return Spec{}, "", err
		}
	} else {
		s.Name = "run"
		if err := s.applyFlags(f, baseFlag); err != nil {
			return Spec{}, "", err
		}
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	if err := s.applyFlags(f, func(name string) bool { return given[name] }); err != nil {
		return Spec{}, "", err
	}
	if err := s.validate(); err != nil {
		return Spec{}, "", err
	}
	return s, about, nil
}

// applyFlags applies, in registration order, the flags that pick selects.
func (s *Spec) applyFlags(f *SpecFlags, pick func(name string) bool) error {
	for _, o := range f.overrides {
		if !pick(o.name) {
			continue
		}
		if err := o.apply(s); err != nil {
			return err
		}
	}
	return nil
}

// validate checks what no single flag can: the parts of a spec that must
// agree. Errors name the flag that sets the part.
func (s *Spec) validate() error {
	if s.Trace == "" && len(s.Models) == 0 {
		return errors.New("simulate: give -scenario, -trace or -models")
	}
	if s.Max > 0 && s.Min > s.Max {
		return fmt.Errorf("-min: %d is above -max %d", s.Min, s.Max)
	}
	if s.Trace == "" && s.Duration <= 0 {
		return errors.New("-duration: must be positive")
	}
	if s.BurstRate > 0 && s.BurstLength > s.BurstEvery {
		return fmt.Errorf("-burst-length: %s is longer than -burst-every %s", s.BurstLength, s.BurstEvery)
	}
	return nil
}

// ValidRunName reports whether s can name a run's output files: no path
// separators and no leading dot.
func ValidRunName(s string) bool {
	if s == "" || s[0] == '.' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
