package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/sim"
)

const simulateUsage = `faas-gpu simulate: replay a workload against the real scheduler in virtual time, policy against policy.

Usage:
  faas-gpu simulate -scenario NAME [flags]     a published run (docs/evaluation.md), flags override it
  faas-gpu simulate -trace FILE [flags]        replay a trace: CSV "time,function,model", time in seconds
  faas-gpu simulate -models LIST [flags]       a generated workload
  faas-gpu simulate -suite heldout [flags]     every workload of a suite, one line per workload and policy

Scenarios: %s
Suites:    %s
Policies:  %s

Flags:
`

// simulateFlags are the flags of simulate: the run's (sim.SpecFlags) and
// this command's own, which say where its results go.
type simulateFlags struct {
	fs                 *flag.FlagSet
	spec               *sim.SpecFlags
	profilesCSV, out   string
	suite              string
	writeTrace         string
	parallel           int
	quiet, perFunction bool
	listSuites         bool
}

func newSimulateFlags(stderr io.Writer) *simulateFlags {
	f := &simulateFlags{fs: flag.NewFlagSet("simulate", flag.ContinueOnError)}
	fs := f.fs
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), simulateUsage, strings.Join(sim.ScenarioNames(), ", "), strings.Join(sim.Suites(), ", "), strings.Join(sim.PolicyNames(), ", "))
		fs.PrintDefaults()
	}
	f.spec = sim.RegisterSpecFlags(fs)
	fs.StringVar(&f.profilesCSV, "profiles-csv", "", "measured latency table (default: ../shared/data/"+sim.TableName+" beside the repository; else the built-in quota-100 profiles)")
	fs.StringVar(&f.suite, "suite", "", "run a workload suite instead of one run: heldout, a family draw or a zoo draw (-list-suites names them; docs/evaluation.md), or SUITE/PREFIX for some of it (with -out, each such workload's series and plots too); flags other than the workload's apply to each")
	fs.StringVar(&f.out, "out", "", "folder for CSV files and SVG plots, named <name>-*")
	fs.StringVar(&f.writeTrace, "write-trace", "", "also write the workload as a trace file")
	fs.IntVar(&f.parallel, "parallel", 0, "policies simulated at once (0: one per CPU)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress on stderr")
	fs.BoolVar(&f.perFunction, "per-function", false, "also print each function's latency and SLO violations")
	fs.BoolVar(&f.listSuites, "list-suites", false, "print the suites' names, one a line, and run nothing (make bench-sim runs the family and zoo draws from it)")
	return f
}

// simulateCmd is the simulate verb: it builds the run, simulates every
// policy and prints the table (and with -out writes CSV and SVG files).
func simulateCmd(args []string, stdout, stderr io.Writer) error {
	f := newSimulateFlags(stderr)
	if help, err := parseArgs(f.fs, args, "simulate"); help || err != nil {
		return err
	}
	if f.listSuites {
		_, err := fmt.Fprintln(stdout, strings.Join(sim.Suites(), "\n"))
		return err
	}
	if f.suite != "" {
		return simulateSuite(f, stdout, stderr)
	}
	spec, about, err := f.spec.Spec()
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
	if opts.Contention, err = spec.ContentionModel(); err != nil {
		return err
	}
	contention := "off"
	if opts.Contention != nil {
		contention = opts.Contention.Source
	}
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
	fmt.Fprintf(stdout, "workload: %d functions, %d models, %d requests over %s; cluster: %s (%d GPUs); profiles: %s; contention: %s\n\n",
		len(wl.Functions), len(wl.Models), len(wl.Arrivals), wl.Duration, inv.Source, len(inv.Devices()), cat.Source, contention)
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
				fmt.Fprintf(stdout, "  %-12s %6.0f GPU-s: x%.2f the SM-only bound, x%.2f the whole-GPU bound, x%.2f the queueing bound (whole GPUs)\n",
					r.Policy, r.GPUSeconds, r.GPUSeconds/lb.SMGPUSeconds, r.GPUSeconds/lb.WholeGPUSeconds, r.GPUSeconds/lb.QueueWholeGPUSeconds)
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
		if !sim.AnyMeasured(results) {
			fmt.Fprintf(stdout, "note: no measured request completed (is -warmup past the load, or -drain too short?): %s-latency-cdf.svg is empty\n", spec.Name)
		}
	}
	return nil
}

// suiteRow is one workload under one policy in -suite's table.
type suiteRow struct {
	workload, policy string
	violations       float64
	gpuSeconds       float64
	bound            float64 // whole-GPU packing bound, GPU-s; 0: not computed
	// queueBound is the queueing-aware bound in whole GPUs (sim.LowerBound's
	// QueueWholeGPUSeconds), GPU-s; 0 or NaN: not computed.
	queueBound float64
	p99        float64
	// outsideFirstBurst is the % of violations among requests arriving
	// outside the first burst (sim.Spec.FirstBurst); NaN: no bursts, -1:
	// no SLO.
	outsideFirstBurst float64
	// smBooked is the SM x time share booked for replicas in service over
	// the GPUs in use (sim.Result.SMAllocated), %. queueSM is the
	// queueing-aware bound's SM alone (sim.LowerBound's
	// QueueSMGPUSeconds), GPU-s; 0 or NaN: not computed. They split a
	// run's cost over the queueing bound into xQueueSM x xPacking.
	smBooked, queueSM float64
}

// simulateSuite runs every workload of -suite and prints one line per
// workload and policy: SLO violations and GPU-seconds against the
// whole-GPU packing bound, the two figures issue 12's targets are set in;
// with -out also as <suite>-suite.csv.
func simulateSuite(f *simulateFlags, stdout, stderr io.Writer) error {
	specs, abouts, err := f.spec.SuiteSpecs(f.suite)
	if err != nil {
		return err
	}
	var rows []suiteRow
	for i, spec := range specs {
		inv, err := spec.Cluster()
		if err != nil {
			return fmt.Errorf("%s: %w", spec.Name, err)
		}
		cat, err := loadSimCatalog(f.profilesCSV, &spec)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.Name, err)
		}
		product := inv.Devices()[0].Product
		wl, err := spec.Workload(cat, product)
		if err != nil {
			return fmt.Errorf("%s: %w", spec.Name, err)
		}
		opts := spec.Options
		if opts.Contention, err = spec.ContentionModel(); err != nil {
			return fmt.Errorf("%s: %w", spec.Name, err)
		}
		if !f.quiet {
			fmt.Fprintf(stderr, "%s: %s\n", spec.Name, abouts[i])
			opts.Progress = stderr
		}
		results, err := sim.Run(sim.Config{Workload: wl, Inventory: inv, Catalog: cat, Policies: spec.Policies, Options: opts, Parallel: f.parallel})
		if err != nil {
			return fmt.Errorf("simulate %s: %w", spec.Name, err)
		}
		bound, queueBound, queueSM := 0.0, 0.0, 0.0
		if lb, err := sim.ComputeLowerBound(wl, cat, product, inv.Devices()[0].MemoryBytes, opts.MaxBatch, 0); err == nil {
			bound, queueBound, queueSM = lb.WholeGPUSeconds, lb.QueueWholeGPUSeconds, lb.QueueSMGPUSeconds
			if lb.QueueErr != nil {
				fmt.Fprintf(stderr, "%s: queueing-aware bound not computed: %v\n", spec.Name, lb.QueueErr)
			}
		} else {
			fmt.Fprintf(stderr, "%s: packing lower bound not computed: %v\n", spec.Name, err)
		}
		if f.out != "" && strings.Contains(f.suite, "/") {
			// Part of a suite named (SUITE/PREFIX): each workload's series,
			// CDF and plots too, so that a run the table flags can be
			// looked into without rebuilding it from flags. Not for a whole
			// suite: make bench-sim publishes only its table.
			if err := writeSimOutputs(f.out, spec.Name, results); err != nil {
				return err
			}
		}
		from, to, bursty := spec.FirstBurst()
		for _, r := range results {
			outside := math.NaN()
			if bursty {
				outside = r.SLOViolationsOutside(from, to)
			}
			rows = append(rows, suiteRow{workload: spec.Name, policy: r.Policy, violations: r.SLOViolations, gpuSeconds: r.GPUSeconds,
				bound: bound, queueBound: queueBound, p99: r.P99, outsideFirstBurst: outside, smBooked: r.SMAllocated, queueSM: queueSM})
		}
	}
	writeSuiteTable(stdout, rows)
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		name, _, _ := strings.Cut(f.suite, "/")
		path := filepath.Join(f.out, name+"-suite.csv")
		file, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("-out: %w", err)
		}
		writeSuiteCSV(file, rows)
		if err := file.Close(); err != nil {
			return fmt.Errorf("-out %s: %w", path, err)
		}
		fmt.Fprintf(stdout, "wrote %s\n", path)
	}
	return nil
}

func (r suiteRow) times() float64 {
	if r.bound <= 0 {
		return math.NaN()
	}
	return r.gpuSeconds / r.bound
}

// queueTimes is GPU-seconds over the queueing-aware bound (NaN: none).
func (r suiteRow) queueTimes() float64 {
	if !(r.queueBound > 0) {
		return math.NaN()
	}
	return r.gpuSeconds / r.queueBound
}

// xQueueSM is the SM a run booked for replicas in service, GPU-s, over the
// queueing-aware bound's SM (NaN: not computed): above 1, the pools
// booked more than the plan for each window's true rate (reaction,
// capacity held for a burst, pools built of small slices).
func (r suiteRow) xQueueSM() float64 {
	if !(r.queueSM > 0) {
		return math.NaN()
	}
	return r.gpuSeconds * r.smBooked / 100 / r.queueSM
}

// xPacking is the GPUs a run held per SM it booked, over the queueing-
// aware bound's GPUs per SM (NaN: not computed): above 1, GPUs were held
// beyond what the booked SM needed (memory of small or warm replicas,
// room a consolidation did not take back). x queueing bound = xQueueSM x
// xPacking.
func (r suiteRow) xPacking() float64 {
	if !(r.queueSM > 0) || !(r.queueBound > 0) || !(r.smBooked > 0) {
		return math.NaN()
	}
	return r.queueSM / r.queueBound / (r.smBooked / 100)
}

// writeSuiteTable prints the suite's table. Scripts read its rows by
// position (SLO violations in field 4, x whole-GPU bound in field 7 of a
// '|'-split row): new columns go at the end.
func writeSuiteTable(w io.Writer, rows []suiteRow) {
	fmt.Fprintf(w, "| workload | policy | SLO viol %% | p99 ms | GPU-s | x whole-GPU bound | x queueing bound | viol %% outside the first burst | x queueing SM | x packing |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		outside := "-" // no bursts, or no SLO
		if r.outsideFirstBurst >= 0 {
			outside = fmt.Sprintf("%.2f", r.outsideFirstBurst)
		}
		fmt.Fprintf(w, "| %s | %s | %.2f | %.1f | %.0f | %.2f | %.2f | %s | %.2f | %.2f |\n", r.workload, r.policy, r.violations, r.p99, r.gpuSeconds, r.times(), r.queueTimes(), outside, r.xQueueSM(), r.xPacking())
	}
	for _, pol := range uniquePolicies(rows) {
		var times, queue, queueSM, packing []float64
		worst, over, bursty, overOutside := 0.0, 0, 0, 0
		for _, r := range rows {
			if r.policy != pol {
				continue
			}
			times = append(times, r.times())
			queue = append(queue, r.queueTimes())
			queueSM = append(queueSM, r.xQueueSM())
			packing = append(packing, r.xPacking())
			worst = max(worst, r.violations)
			if r.violations > 1 {
				over++
			}
			if r.outsideFirstBurst >= 0 {
				bursty++
				if r.outsideFirstBurst > 1 {
					overOutside++
				}
			}
		}
		fmt.Fprintf(w, "%s: %d of %d workloads above 1 %% violations (worst %.2f %%); x bound median %.2f, max %.2f, %d above 1.3, %d above 1.6; x queueing bound median %.2f, max %.2f, %d above 1.3, %d above 1.6",
			pol, over, len(times), worst, median(times), slices.Max(times), above(times, 1.3), above(times, 1.6),
			median(queue), slices.Max(queue), above(queue, 1.3), above(queue, 1.6))
		if bursty > 0 {
			fmt.Fprintf(w, "; %d of %d burst workloads above 1 %% outside their first burst", overOutside, bursty)
		}
		fmt.Fprintf(w, "; x queueing SM median %.2f, x packing median %.2f", median(queueSM), median(packing))
		fmt.Fprintln(w)
	}
}

// above counts the xs above limit (NaN is not).
func above(xs []float64, limit float64) int {
	n := 0
	for _, x := range xs {
		if x > limit {
			n++
		}
	}
	return n
}

// writeSuiteCSV writes the table's rows; columns are only ever appended,
// for scripts that read them by position.
func writeSuiteCSV(w io.Writer, rows []suiteRow) {
	fmt.Fprintln(w, "workload,policy,slo_violations_pct,p99_ms,gpu_seconds,whole_gpu_bound_seconds,x_bound,queue_bound_seconds,x_queue_bound,slo_violations_outside_first_burst_pct,sm_booked_pct,queue_sm_seconds,x_queue_sm,x_packing")
	for _, r := range rows {
		outside := "" // no bursts, or no SLO
		if r.outsideFirstBurst >= 0 {
			outside = fmt.Sprintf("%.3f", r.outsideFirstBurst)
		}
		fmt.Fprintf(w, "%s,%s,%.3f,%.2f,%.1f,%.1f,%.3f,%.1f,%.3f,%s,%.2f,%.1f,%.3f,%.3f\n", r.workload, r.policy, r.violations, r.p99, r.gpuSeconds, r.bound, r.times(), r.queueBound, r.queueTimes(), outside, r.smBooked, r.queueSM, r.xQueueSM(), r.xPacking())
	}
}

func uniquePolicies(rows []suiteRow) []string {
	var out []string
	for _, r := range rows {
		if !slices.Contains(out, r.policy) {
			out = append(out, r.policy)
		}
	}
	return out
}

// median of xs (NaN, a workload without a bound, sorts first and is kept:
// it shows in the table rather than vanishing from the median).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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
