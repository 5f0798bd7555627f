package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/sim"
)

func TestSimulateSuiteRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown suite", []string{"-suite", "nope"}, "unknown suite"},
		{"unknown workload", []string{"-suite", "heldout/zz"}, "no workload"},
		{"with a scenario", []string{"-suite", "heldout", "-scenario", "cost"}, "not both"},
		{"changing a workload", []string{"-suite", "heldout", "-rate", "5"}, "-rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := simulateCmd(tt.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// -list-suites prints every suite, the held-out suite, each family draw
// and each zoo draw, one a line: make bench-sim takes the draws from it.
func TestSimulateListSuites(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := simulateCmd([]string{"-list-suites"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(out.String())
	if want := sim.Suites(); !slices.Equal(got, want) || len(want) < 2 || want[0] != "heldout" || want[1] != "family" || !slices.Contains(want, "zoo") {
		t.Errorf("-list-suites printed %q, want %q (heldout, then the family and zoo draws)", got, want)
	}
}

// One workload of the suite through the command: a line per policy, the
// summary and the CSV with the same rows.
func TestSimulateSuiteOneWorkload(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	if err := simulateCmd([]string{"-suite", "heldout/h15", "-quiet", "-policies", "faas-gpu", "-out", dir}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "| h15-light-load | faas-gpu |") || !strings.Contains(out.String(), "x bound median") {
		t.Errorf("table lacks the workload's row or the summary:\n%s", out.String())
	}
	csv, err := os.ReadFile(filepath.Join(dir, "heldout-suite.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "h15-light-load,faas-gpu,") {
		t.Errorf("CSV = %q, want a header and one row", csv)
	}
	// Scripts read the table and the CSV by position: later columns come
	// after the ones before them.
	const oldHeader = "workload,policy,slo_violations_pct,p99_ms,gpu_seconds,whole_gpu_bound_seconds,x_bound,queue_bound_seconds,x_queue_bound,"
	const header = oldHeader + "slo_violations_outside_first_burst_pct,sm_booked_pct,queue_sm_seconds,x_queue_sm,x_packing"
	if lines[0] != header {
		t.Errorf("CSV header = %q, want %q", lines[0], header)
	}
	row := strings.Split(lines[1], ",")
	if len(row) != 14 || row[9] != "" {
		t.Errorf("CSV row %q: want 14 fields, the 10th empty (h15 has no bursts)", lines[1])
	} else {
		// The split of the cost over the queueing bound: the SM booked
		// over the bound's, times the GPUs held per SM booked over the
		// bound's, from the same row's figures.
		num := func(i int) float64 {
			v, err := strconv.ParseFloat(row[i], 64)
			if err != nil {
				t.Errorf("CSV row %q, field %d: %v", lines[1], i+1, err)
			}
			return v
		}
		gpuSeconds, xQueue, booked, queueSM, xSM, xPacking := num(4), num(8), num(10), num(11), num(12), num(13)
		if booked <= 0 || booked > 100 || queueSM <= 0 {
			t.Errorf("CSV row %q: SM booked %.2f %% and queueing SM %.1f GPU-s, want a share in (0, 100] and a positive figure", lines[1], booked, queueSM)
		}
		if want := gpuSeconds * booked / 100 / queueSM; math.Abs(xSM-want) > 0.002 {
			t.Errorf("CSV row %q: x queueing SM %.3f, want GPU-s x SM booked / queueing SM = %.3f", lines[1], xSM, want)
		}
		if math.Abs(xSM*xPacking-xQueue) > 0.005 {
			t.Errorf("CSV row %q: x queueing SM %.3f x x packing %.3f = %.3f, want x queueing bound %.3f", lines[1], xSM, xPacking, xSM*xPacking, xQueue)
		}
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if !strings.HasPrefix(line, "| workload ") && !strings.HasPrefix(line, "| h15") {
			continue
		}
		fields := strings.Split(line, "|")
		if len(fields) != 12 {
			t.Errorf("%q: %d fields, want 12", line, len(fields))
			continue
		}
		if strings.HasPrefix(line, "| h15") && strings.TrimSpace(fields[8]) != "-" {
			t.Errorf("%q: h15 has no bursts, want - outside the first burst", line)
		}
		// awk -F'|' counts from 1: SLO violations are $4, x bound $7.
		if strings.HasPrefix(line, "| workload ") && (strings.TrimSpace(fields[3]) != "SLO viol %" ||
			strings.TrimSpace(fields[6]) != "x whole-GPU bound" || strings.TrimSpace(fields[7]) != "x queueing bound") {
			t.Errorf("header %q: want SLO viol %% as awk's $4, x whole-GPU bound as $7, x queueing bound as $8", line)
		}
	}
	if !strings.Contains(out.String(), "x queueing bound median") || !strings.Contains(out.String(), "x packing median") {
		t.Errorf("the summary lacks the queueing bound or its split into booking and packing:\n%s", out.String())
	}
	// Part of a suite named: the workload's own series, so that a flagged
	// run can be looked into second by second.
	series, err := os.ReadFile(filepath.Join(dir, "h15-light-load-series.csv"))
	if err != nil {
		t.Fatalf("one workload named with -out: %v", err)
	}
	rows := strings.Split(strings.TrimSpace(string(series)), "\n")
	if len(rows) < 60 || !strings.HasPrefix(rows[0], "policy,time_s,") || !strings.HasPrefix(rows[1], "faas-gpu,") {
		t.Errorf("h15-light-load-series.csv: %d lines, starting %q, want a header and faas-gpu's seconds", len(rows), rows[:min(2, len(rows))])
	}
	if _, err := os.Stat(filepath.Join(dir, "h15-light-load-gpus.svg")); err != nil {
		t.Errorf("the workload's plots: %v", err)
	}
}

// A burst workload's row says what it missed outside its first burst: a
// figure between 0 and 100, and the summary counts the burst workloads.
func TestSimulateSuiteOutsideTheFirstBurst(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := simulateCmd([]string{"-suite", "heldout/h10", "-quiet", "-policies", "faas-gpu"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	var row string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, "| h10") {
			row = line
		}
	}
	fields := strings.Split(row, "|")
	if len(fields) != 12 {
		t.Fatalf("row %q: want 12 fields", row)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(fields[8]), 64)
	if err != nil || v < 0 || v > 100 {
		t.Errorf("row %q: outside the first burst %q, want a %% (%v)", row, fields[8], err)
	}
	if !strings.Contains(out.String(), "0 of 1 burst workloads above 1 % outside their first burst") &&
		!strings.Contains(out.String(), "1 of 1 burst workloads above 1 % outside their first burst") {
		t.Errorf("the summary does not count h10 as a burst workload:\n%s", out.String())
	}
}
