package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/sim"
	"k8s.io/apimachinery/pkg/api/resource"
)

const simulateUsage = `faas-gpu simulate: replay a workload against the real scheduler in virtual time, policy against policy.

Usage:
  faas-gpu simulate -scenario NAME [flags]     a published run (docs/evaluation.md), flags override it
  faas-gpu simulate -trace FILE [flags]        replay a trace: CSV "time,function,model", time in seconds
  faas-gpu simulate -models LIST [flags]       a generated workload

Scenarios: %s
Policies:  %s

Flags:
`

// simulateFlags are the flags of simulate; each sets one sim.Spec field
// when given, on top of the scenario's value.
type simulateFlags struct {
	fs                              *flag.FlagSet
	scenario, trace, models, ramp   string
	policies, inventory, memory     string
	process, profilesCSV, out       string
	writeTrace, name                string
	functions, sm, min, max         int
	gpus, perNode, maxBatch, bound  int
	parallel                        int
	zipf, rate, burstRate, sloFac   float64
	sloMargin                       float64
	seed                            uint64
	multiModel, quiet, perFunction  bool
	noBacklog                       bool
	duration, burstEvery, burstLen  time.Duration
	slo, warmup, drain, start, warm time.Duration
}

func newSimulateFlags(stderr io.Writer) *simulateFlags {
	f := &simulateFlags{fs: flag.NewFlagSet("simulate", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), simulateUsage, strings.Join(sim.ScenarioNames(), ", "), strings.Join(sim.PolicyNames(), ", "))
		fs.PrintDefaults()
	}
	fs.StringVar(&f.scenario, "scenario", "", "a published run: "+strings.Join(sim.ScenarioNames(), ", "))
	fs.StringVar(&f.trace, "trace", "", "trace file to replay (header "+sim.TraceHeader+")")
	fs.StringVar(&f.models, "models", "", "models, one function each: names, name*N (N functions), all, largest:N, smallest:N, spread:N")
	fs.IntVar(&f.functions, "functions", 0, "number of functions, cycling through -models (0: one per model)")
	fs.BoolVar(&f.multiModel, "multi-model", false, "one function, zoo, serving every model of -models (requests carry X-Model)")
	fs.Float64Var(&f.zipf, "zipf", 0, "Zipf exponent of the functions' shares (of the models' with -multi-model); 0: equal")
	fs.StringVar(&f.process, "process", "poisson", "arrivals: poisson, or even (evenly spaced)")
	fs.Float64Var(&f.rate, "rate", 10, "total offered load, requests/s")
	fs.StringVar(&f.ramp, "ramp", "", "piecewise linear load instead of -rate: time:rate,... (e.g. 0s:20,90s:110,180s:20)")
	fs.Float64Var(&f.burstRate, "burst-rate", 0, "load during bursts (requests/s) on top of -rate's base")
	fs.DurationVar(&f.burstEvery, "burst-every", time.Minute, "period of the bursts")
	fs.DurationVar(&f.burstLen, "burst-length", 10*time.Second, "length of a burst")
	fs.DurationVar(&f.duration, "duration", time.Minute, "length of the offered load (with -trace: 0 reads it off the trace)")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed of the workload: a seed gives the same run every time")
	fs.DurationVar(&f.slo, "slo", 0, "latency SLO of every function (com.openfaas.gpu.slo)")
	fs.Float64Var(&f.sloFac, "slo-factor", 0, "SLO of each function: this multiple of its model's batch-1 latency on a whole GPU")
	fs.Float64Var(&f.sloMargin, "slo-margin", 1, "faas-gpu and fast-gshare are given SLO x this as their SLO (faas-gpu then holds its batches to half of it, fast-gshare to all of it); violations still count against the SLO")
	fs.IntVar(&f.sm, "sm", 0, "SM % of every replica (com.openfaas.gpu.sm); 0: the policy chooses")
	fs.StringVar(&f.memory, "memory", "", "GPU memory of every replica (com.openfaas.gpu.memory), e.g. 4Gi; empty: from the profile")
	fs.IntVar(&f.min, "min", 0, "replicas at least (com.openfaas.scale.min; 0: 1)")
	fs.IntVar(&f.max, "max", 0, "replicas at most (com.openfaas.scale.max; 0: 20)")
	fs.StringVar(&f.inventory, "inventory", "", "GPU inventory file (docs/inventory.md) instead of -gpus")
	fs.IntVar(&f.gpus, "gpus", 4, "number of Tesla V100-SXM2-16GB")
	fs.IntVar(&f.perNode, "gpus-per-node", 8, "V100s per node")
	fs.StringVar(&f.policies, "policies", "all", "policies to compare, comma-separated: "+strings.Join(sim.PolicyNames(), ", "))
	fs.DurationVar(&f.warmup, "warmup", 0, "leave requests arriving before this out of the request metrics")
	fs.DurationVar(&f.drain, "drain", 5*time.Minute, "how long after the load requests may still finish")
	fs.IntVar(&f.maxBatch, "max-batch", 0, "cap every replica's batch size (0: none)")
	fs.BoolVar(&f.noBacklog, "no-backlog", false, "faas-gpu's autoscaler follows the rate alone, not told the requests waiting (an ablation)")
	fs.DurationVar(&f.start, "container-start", 2*time.Second, "placement to process started, before the model loads")
	fs.IntVar(&f.bound, "locality-bound", 2, "the provider's -locality-bound: requests waiting for a busy replica holding their model")
	fs.DurationVar(&f.warm, "warm-ttl", 10*time.Minute, "the provider's -warm-ttl")
	fs.StringVar(&f.profilesCSV, "profiles-csv", "", "measured latency table (default: ../shared/data/"+sim.TableName+" beside the repository; else the built-in quota-100 profiles)")
	fs.StringVar(&f.out, "out", "", "folder for CSV files and SVG plots, named <name>-*")
	fs.StringVar(&f.name, "name", "", "name of the run in -out's file names (default: the scenario's, the trace's, or run)")
	fs.StringVar(&f.writeTrace, "write-trace", "", "also write the workload as a trace file")
	fs.IntVar(&f.parallel, "parallel", 0, "policies simulated at once (0: one per CPU)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	fs.BoolVar(&f.perFunction, "per-function", false, "also print each function's latency and SLO violations")
	return f
}

// spec is the scenario's spec with every flag given on top of it.
func (f *simulateFlags) spec() (sim.Spec, string, error) {
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var s sim.Spec
	about := ""
	if f.scenario != "" {
		var err error
		if s, about, err = sim.Scenario(f.scenario); err != nil {
			return s, "", err
		}
	} else {
		// No scenario: the flags' defaults are the spec.
		for _, name := range []string{"process", "rate", "duration", "seed", "gpus", "gpus-per-node", "policies"} {
			set[name] = true
		}
		s.Name = "run"
	}
	if set["trace"] {
		s.Trace, s.Models, s.Name = f.trace, nil, strings.TrimSuffix(filepath.Base(f.trace), filepath.Ext(f.trace))
		if !set["duration"] {
			s.Duration = 0
		}
	}
	if set["models"] {
		s.Models = strings.Split(f.models, ",")
	}
	if set["name"] {
		if !validRunName(f.name) {
			return s, "", fmt.Errorf("-name: %q must be letters, digits, '.', '_' or '-'", f.name)
		}
		s.Name = f.name
	}
	if s.Trace == "" && len(s.Models) == 0 {
		return s, "", errors.New("simulate: give -scenario, -trace or -models")
	}
	if set["functions"] {
		s.Functions = f.functions
	}
	if set["multi-model"] {
		s.MultiModel = f.multiModel
	}
	if set["zipf"] {
		s.Zipf = f.zipf
	}
	if set["process"] {
		switch f.process {
		case "poisson":
			s.Poisson = true
		case "even":
			s.Poisson = false
		default:
			return s, "", fmt.Errorf("-process: %q is not poisson or even", f.process)
		}
	}
	if set["rate"] {
		s.Rate, s.Ramp = f.rate, nil
	}
	if set["ramp"] {
		r, err := sim.ParseRamp(f.ramp)
		if err != nil {
			return s, "", fmt.Errorf("-ramp: %w", err)
		}
		s.Ramp = r
	}
	if set["burst-rate"] {
		s.BurstRate, s.BurstEvery, s.BurstLength = f.burstRate, f.burstEvery, f.burstLen
	}
	if set["duration"] {
		s.Duration = f.duration
	}
	if set["seed"] {
		s.Seed = f.seed
	}
	if set["slo"] {
		s.SLO = f.slo
	}
	if set["slo-factor"] {
		s.SLOFactor = f.sloFac
	}
	if set["sm"] {
		if f.sm < 0 || f.sm > 100 {
			return s, "", fmt.Errorf("-sm: %d is outside 0-100", f.sm)
		}
		s.SMPercent = f.sm
	}
	if set["memory"] {
		q, err := resource.ParseQuantity(f.memory)
		if err != nil || q.Value() <= 0 {
			return s, "", fmt.Errorf("-memory: %q is not a positive quantity such as 4Gi", f.memory)
		}
		s.MemoryBytes = q.Value()
	}
	if set["min"] {
		if f.min < 0 {
			return s, "", fmt.Errorf("-min: %d must be 0 or more", f.min)
		}
		s.Min = f.min
	}
	if set["max"] {
		if f.max < 0 {
			return s, "", fmt.Errorf("-max: %d must be 0 (the default of 20) or more", f.max)
		}
		s.Max = f.max
	}
	if set["min"] && set["max"] && f.max > 0 && f.min > f.max {
		return s, "", fmt.Errorf("-min: %d is above -max %d", f.min, f.max)
	}
	if set["inventory"] {
		s.Inventory = f.inventory
	}
	if set["gpus"] {
		s.GPUs, s.Inventory = f.gpus, ""
	}
	if set["gpus-per-node"] {
		if f.perNode < 1 {
			return s, "", fmt.Errorf("-gpus-per-node: %d must be at least 1", f.perNode)
		}
		s.PerNode = f.perNode
	}
	if set["policies"] {
		p, err := sim.ParsePolicies(f.policies)
		if err != nil {
			return s, "", fmt.Errorf("-policies: %w", err)
		}
		s.Policies = p
	}
	o := &s.Options
	if set["warmup"] {
		o.Warmup = f.warmup
	}
	if set["drain"] {
		o.Drain = f.drain
	}
	if set["slo-margin"] {
		if f.sloMargin <= 0 || f.sloMargin > 1 {
			return s, "", fmt.Errorf("-slo-margin: %v is outside (0, 1]", f.sloMargin)
		}
		o.SLOMargin = f.sloMargin
	}
	if set["max-batch"] {
		if f.maxBatch < 0 {
			return s, "", fmt.Errorf("-max-batch: %d must be 0 (no cap) or more", f.maxBatch)
		}
		o.MaxBatch = f.maxBatch
	}
	if set["no-backlog"] {
		o.NoBacklog = f.noBacklog
	}
	if set["container-start"] {
		o.ContainerStart = f.start
	}
	if set["locality-bound"] {
		if f.bound < 1 {
			return s, "", fmt.Errorf("-locality-bound: %d must be at least 1", f.bound)
		}
		o.LocalityBound = f.bound
	}
	if set["warm-ttl"] {
		o.WarmTTL = f.warm
	}
	if s.Trace == "" && s.Duration <= 0 {
		return s, "", errors.New("-duration: must be positive")
	}
	return s, about, nil
}

func validRunName(s string) bool {
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

// simulateCmd is the simulate verb: it builds the run, simulates every
// policy and prints the table (and with -out writes CSV and SVG files).
func simulateCmd(args []string, stdout, stderr io.Writer) error {
	f := newSimulateFlags(stderr)
	if err := f.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("simulate: unexpected argument %q", f.fs.Arg(0))
	}
	spec, about, err := f.spec()
	if err != nil {
		return err
	}
	inv, err := spec.Cluster()
	if err != nil {
		return err
	}
	cat, err := loadSimCatalog(f.profilesCSV, &spec)
	if err != nil {
		return err
	}
	product := inv.Devices()[0].Product
	wl, err := spec.Workload(cat, product)
	if err != nil {
		return err
	}
	if f.writeTrace != "" {
		if err := writeTraceFile(f.writeTrace, wl); err != nil {
			return err
		}
	}
	opts := spec.Options
	if !f.quiet {
		opts.Progress = stderr
	}
	mem := startMemorySampler()
	began := time.Now()
	results, err := sim.Run(sim.Config{Workload: wl, Inventory: inv, Catalog: cat, Policies: spec.Policies, Options: opts, Parallel: f.parallel})
	wall := time.Since(began)
	peak := mem.stop()
	if err != nil {
		return fmt.Errorf("simulate: %w", err)
	}
	if about != "" {
		fmt.Fprintf(stdout, "scenario %s: %s\n", spec.Name, about)
	}
	fmt.Fprintf(stdout, "workload: %d functions, %d models, %d requests over %s; cluster: %s (%d GPUs); profiles: %s\n\n",
		len(wl.Functions), len(wl.Models), len(wl.Arrivals), wl.Duration, inv.Source, len(inv.Devices()), cat.Source)
	if err := sim.WriteTable(stdout, results); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	if f.perFunction {
		if err := sim.WriteFunctionTable(stdout, results); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
	}
	sim.WriteComparisons(stdout, results)
	hasSLO := false
	for _, fn := range wl.Functions {
		hasSLO = hasSLO || fn.SLO > 0
	}
	if hasSLO && inv.Devices()[0].MemoryBytes > 0 {
		lb, err := sim.ComputeLowerBound(wl, cat, product, inv.Devices()[0].MemoryBytes, opts.MaxBatch, 0)
		if err != nil {
			fmt.Fprintf(stdout, "packing lower bound: not computed: %v\n", err)
		} else {
			fmt.Fprintln(stdout, lb)
			for _, r := range results {
				fmt.Fprintf(stdout, "  %-12s %6.0f GPU-s: x%.2f the SM-only bound, x%.2f the whole-GPU bound\n",
					r.Policy, r.GPUSeconds, r.GPUSeconds/lb.SMGPUSeconds, r.GPUSeconds/lb.WholeGPUSeconds)
			}
		}
	}
	fmt.Fprintf(stdout, "\nsimulator: %s wall for %d policies (-parallel %d), peak memory %.0f MiB\n",
		wall.Round(time.Millisecond), len(results), f.parallel, float64(peak)/(1<<20))
	for _, r := range results {
		fmt.Fprintf(stdout, "  %-12s %8d requests, %9d events in %6s: %.0f simulated requests per wall second\n",
			r.Policy, len(wl.Arrivals), r.Events, r.Wall.Round(time.Millisecond), float64(len(wl.Arrivals))/r.Wall.Seconds())
	}
	if f.out != "" {
		if err := writeSimOutputs(f.out, spec.Name, results); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "wrote %s/%s-{summary,series,cdf,functions}.csv and %s-*.svg\n", f.out, spec.Name, spec.Name)
	}
	return nil
}

// loadSimCatalog reads the full measured table (all quotas) for the run's
// models: from -profiles-csv, else from ../shared/data beside the
// repository (found from the working directory), else the built-in
// quota-100 profiles, with which every policy but fast-gshare runs.
func loadSimCatalog(path string, spec *sim.Spec) (*sim.Catalog, error) {
	models, err := spec.ProfileModels()
	if err != nil {
		return nil, err
	}
	if path == "" {
		wd, err := os.Getwd()
		if err == nil {
			path = sim.FindTable(wd)
		}
	}
	if path == "" {
		return sim.BuiltinCatalog()
	}
	return sim.LoadTable(path, models)
}

func writeTraceFile(path string, wl *sim.Workload) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-write-trace: %w", err)
	}
	if err := sim.WriteTrace(f, wl); err != nil {
		f.Close()
		return fmt.Errorf("-write-trace: %w", err)
	}
	return f.Close()
}

func writeSimOutputs(dir, name string, results []*sim.Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	files := []struct {
		suffix string
		write  func(io.Writer) error
	}{
		{"summary.csv", func(w io.Writer) error { return sim.WriteSummaryCSV(w, results) }},
		{"series.csv", func(w io.Writer) error { return sim.WriteSeriesCSV(w, results) }},
		{"cdf.csv", func(w io.Writer) error { return sim.WriteCDFCSV(w, results, 200) }},
		{"functions.csv", func(w io.Writer) error { return sim.WriteFunctionsCSV(w, results) }},
	}
	for _, file := range files {
		path := filepath.Join(dir, name+"-"+file.suffix)
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		if err := file.write(f); err != nil {
			f.Close()
			return fmt.Errorf("-out %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("-out %s: %w", path, err)
		}
	}
	return sim.WritePlots(dir, name, results)
}

// memorySampler records the process's peak memory (mapped from the OS
// and not released, the Go runtime's view of the resident set) every
// 50 ms while simulations run.
type memorySampler struct {
	peak atomic.Uint64
	quit chan struct{}
	wg   sync.WaitGroup
}

func startMemorySampler() *memorySampler {
	m := &memorySampler{quit: make(chan struct{})}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.quit:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memorySampler) sample() {
	s := []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return
	}
	v := s[0].Value.Uint64() - s[1].Value.Uint64()
	for {
		old := m.peak.Load()
		if v <= old || m.peak.CompareAndSwap(old, v) {
			return
		}
	}
}

func (m *memorySampler) stop() uint64 {
	close(m.quit)
	m.wg.Wait()
	m.sample()
	return m.peak.Load()
}
