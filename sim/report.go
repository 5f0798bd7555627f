package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"
)

// WriteTable prints one row per result, the columns of the issue's
// metrics.
func WriteTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tdone\tunfinished\treq/s\tmean ms\tp50 ms\tp99 ms\tSLO viol %\tGPUs mean\tGPUs peak\tGPU-s\tactive GPU-s\tSM alloc %\tutil %\thit %\tcold loads\tnode loads\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%.2f\t%.0f\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t%d\t\n",
			r.Policy, r.Completed, r.Unfinished, r.Throughput, r.Mean, r.P50, r.P99, sloCell(r.SLOViolations),
			r.GPUsMean, r.GPUsPeak, r.GPUSeconds, r.ActiveGPUSeconds, r.SMAllocated, r.Util, r.HitRatio, r.ColdLoads, r.NodeLoads)
	}
	return tw.Flush()
}

func sloCell(v float64) string {
	if v < 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// summaryHeader are the columns of summary.csv.
var summaryHeader = []string{"policy", "workload", "requests", "completed", "unfinished", "throughput_rps",
	"mean_ms", "p50_ms", "p99_ms", "slo_violation_pct", "gpus_mean", "gpus_peak", "gpu_seconds", "active_gpu_seconds",
	"sm_allocated_pct", "util_pct", "hit_pct", "cold_loads", "node_loads", "span_s", "events", "wall_s"}

// WriteSummaryCSV writes one line per result.
func WriteSummaryCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	cw.Write(summaryHeader)
	for _, r := range results {
		cw.Write([]string{r.Policy, r.Workload, itoa(r.Requests), itoa(r.Completed), itoa(r.Unfinished), ftoa(r.Throughput),
			ftoa(r.Mean), ftoa(r.P50), ftoa(r.P99), ftoa(r.SLOViolations), ftoa(r.GPUsMean), ftoa(r.GPUsPeak), ftoa(r.GPUSeconds),
			ftoa(r.ActiveGPUSeconds), ftoa(r.SMAllocated), ftoa(r.Util), ftoa(r.HitRatio), itoa(r.ColdLoads), itoa(r.NodeLoads),
			ftoa(r.Span.Seconds()), strconv.FormatUint(r.Events, 10), ftoa(r.Wall.Seconds())})
	}
	cw.Flush()
	return cw.Error()
}

// WriteSeriesCSV writes every result's time series, one line per sample.
func WriteSeriesCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"policy", "time_s", "gpus_used", "gpus_active", "sm_allocated_pct", "throughput_rps", "offered_rps", "slo_arrived", "slo_missed"})
	for _, r := range results {
		for _, s := range r.Series {
			cw.Write([]string{r.Policy, ftoa(s.At.Seconds()), itoa(s.GPUsUsed), itoa(s.GPUsActive), ftoa(s.SMAllocated), ftoa(s.Throughput), ftoa(s.Offered), itoa(s.SLOArrived), itoa(s.SLOMissed)})
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteCDFCSV writes each result's latency CDF at up to points quantiles.
func WriteCDFCSV(w io.Writer, results []*Result, points int) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"policy", "latency_ms", "fraction"})
	for _, r := range results {
		for _, p := range cdf(r.Latencies, points) {
			cw.Write([]string{r.Policy, ftoa(p[0]), ftoa(p[1])})
		}
	}
	cw.Flush()
	return cw.Error()
}

// cdf samples sorted latencies at up to points evenly spaced ranks (and
// the last).
func cdf(sorted []float32, points int) [][2]float64 {
	n := len(sorted)
	if n == 0 {
		return nil
	}
	step := max(1, n/points)
	var out [][2]float64
	for i := step - 1; i < n; i += step {
		out = append(out, [2]float64{float64(sorted[i]), float64(i+1) / float64(n)})
	}
	if out[len(out)-1][1] < 1 {
		out = append(out, [2]float64{float64(sorted[n-1]), 1})
	}
	return out
}

func itoa(n int) string     { return strconv.Itoa(n) }
func ftoa(v float64) string { return strconv.FormatFloat(v, 'f', 4, 64) }

// WriteComparisons prints each policy against the papers' baselines
// present among the results: throughput and GPU-seconds against
// time-sharing (FaST-GShare's comparison), mean latency and miss ratio
// against lb (the GPU-enabled FaaS paper's).
func WriteComparisons(w io.Writer, results []*Result) {
	byName := map[string]*Result{}
	for _, r := range results {
		byName[r.Policy] = r
	}
	if ts := byName["time-sharing"]; ts != nil && ts.Throughput > 0 {
		for _, r := range results {
			if r != ts {
				fmt.Fprintf(w, "vs time-sharing: %-12s throughput x%.2f, GPU-seconds x%.2f, mean GPUs %.2f vs %.2f\n",
					r.Policy, r.Throughput/ts.Throughput, ratio(r.GPUSeconds, ts.GPUSeconds), r.GPUsMean, ts.GPUsMean)
			}
		}
	}
	if lb := byName["lb"]; lb != nil && lb.Mean > 0 {
		for _, r := range results {
			if r != lb {
				fmt.Fprintf(w, "vs lb: %-12s mean latency %s, miss ratio %s (%.2f %% vs %.2f %% of requests)\n",
					r.Policy, change(r.Mean, lb.Mean), change(100-r.HitRatio, 100-lb.HitRatio), 100-r.HitRatio, 100-lb.HitRatio)
			}
		}
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}

// change is a's change from b in %.
func change(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.2f %%", 100*(a-b)/b)
}

// WriteFunctionTable prints each function's latency and SLO violations
// under every policy.
func WriteFunctionTable(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tfunction\tmodel\tSLO ms\trequests\tdone\tmean ms\tp50 ms\tp99 ms\tSLO viol %\t")
	for _, r := range results {
		for _, f := range r.Functions {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%d\t%d\t%.1f\t%.1f\t%.1f\t%s\t\n", r.Policy, f.Name, f.Model,
				float64(f.SLO)/float64(time.Millisecond), f.Requests, f.Completed, f.Mean, f.P50, f.P99, sloCell(f.SLOViolations))
		}
	}
	return tw.Flush()
}

// WriteFunctionsCSV writes WriteFunctionTable's rows.
func WriteFunctionsCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"policy", "function", "model", "slo_ms", "requests", "completed", "mean_ms", "p50_ms", "p99_ms", "slo_violation_pct"})
	for _, r := range results {
		for _, f := range r.Functions {
			cw.Write([]string{r.Policy, f.Name, f.Model, ftoa(float64(f.SLO) / float64(time.Millisecond)), itoa(f.Requests), itoa(f.Completed),
				ftoa(f.Mean), ftoa(f.P50), ftoa(f.P99), ftoa(f.SLOViolations)})
		}
	}
	cw.Flush()
	return cw.Error()
}
