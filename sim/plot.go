package sim

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WritePlots writes latency-cdf.svg, gpus.svg, sm.svg and throughput.svg
// into dir, named after the run. A run in which no measured request
// completed still gets every file; its latency plot is empty and says so.
func WritePlots(dir, run string, results []*Result) error {
	plots := []struct {
		file string
		make func(string, []*Result) (*plot.Plot, error)
	}{
		{"latency-cdf.svg", latencyCDFPlot},
		{"gpus.svg", gpusPlot},
		{"sm.svg", smPlot},
		{"throughput.svg", throughputPlot},
	}
	for _, pl := range plots {
		p, err := pl.make(run, results)
		if err != nil {
			return fmt.Errorf("plot %s: %w", pl.file, err)
		}
		path := filepath.Join(dir, run+"-"+pl.file)
		if err := savePlot(p, path); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
	}
	return nil
}

func savePlot(p *plot.Plot, path string) error {
	w, err := p.WriterTo(7*vg.Inch, 4*vg.Inch, "svg")
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := w.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// lines adds one line per result (plotutil picks distinct colours and
// dashes, so the plot reads in black and white too).
func lines(p *plot.Plot, results []*Result, xy func(*Result) plotter.XYs) error {
	var vs []any
	for _, r := range results {
		pts := xy(r)
		if len(pts) == 0 {
			continue
		}
		vs = append(vs, r.Policy, pts)
	}
	if len(vs) == 0 {
		return nil
	}
	return plotutil.AddLines(p, vs...)
}

func latencyCDFPlot(run string, results []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = run + ": latency CDF"
	p.Y.Label.Text = "fraction of requests"
	p.Legend.Top = false
	p.Y.Min, p.Y.Max = 0, 1
	if !AnyMeasured(results) {
		// A log axis over no data has the range [0, 0], which gonum
		// refuses with a panic; an empty linear plot says what happened.
		p.Title.Text += " (no measured request completed)"
		p.X.Label.Text = "latency (ms)"
		return p, nil
	}
	p.X.Label.Text = "latency (ms, log scale)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	err := lines(p, results, func(r *Result) plotter.XYs {
		var pts plotter.XYs
		for _, c := range cdf(r.Latencies, 500) {
			pts = append(pts, plotter.XY{X: math.Max(c[0], 0.1), Y: c[1]})
		}
		return pts
	})
	return p, err
}

// AnyMeasured reports whether some result has a measured request's
// latency: a run whose -warmup covers the whole load has none.
func AnyMeasured(results []*Result) bool {
	for _, r := range results {
		if len(r.Latencies) > 0 {
			return true
		}
	}
	return false
}

func gpusPlot(run string, results []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = run + ": GPUs holding a replica"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "GPUs"
	p.Legend.Top = true
	err := lines(p, results, func(r *Result) plotter.XYs {
		pts := make(plotter.XYs, 0, len(r.Series))
		for _, s := range r.Series {
			pts = append(pts, plotter.XY{X: s.At.Seconds(), Y: float64(s.GPUsUsed)})
		}
		return pts
	})
	roomForLegend(p, len(results))
	return p, err
}

// roomForLegend starts the y axis at 0 and raises its top so that the
// legend, drawn in the top corner, sits above the lines.
func roomForLegend(p *plot.Plot, entries int) {
	p.Y.Min = 0
	p.Y.Max = max(p.Y.Max, 1) * (1 + 0.09*float64(entries))
}

func smPlot(run string, results []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = run + ": SM x time allocated to replicas in service"
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "% of the cluster"
	p.Legend.Top = true
	err := lines(p, results, func(r *Result) plotter.XYs {
		pts := make(plotter.XYs, 0, len(r.Series))
		for _, s := range r.Series {
			pts = append(pts, plotter.XY{X: s.At.Seconds(), Y: s.SMAllocated})
		}
		return pts
	})
	roomForLegend(p, len(results))
	return p, err
}

func throughputPlot(run string, results []*Result) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = run + ": throughput"
	p.Y.Label.Text = "completed requests / s"
	vals := make(plotter.Values, len(results))
	names := make([]string, len(results))
	for i, r := range results {
		vals[i], names[i] = r.Throughput, r.Policy
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(28))
	if err != nil {
		return nil, err
	}
	bars.Color = plotutil.Color(0)
	p.Add(bars)
	p.NominalX(names...)
	p.Y.Min = 0
	return p, nil
}
