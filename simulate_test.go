package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/sim"
)

func TestSimulateRejectsBadInput(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"nothing to run", nil, "-scenario, -trace or -models"},
		{"unknown scenario", []string{"-scenario", "nope"}, "unknown scenario"},
		{"unknown policy", []string{"-models", "resnet50", "-policies", "lb,magic"}, "-policies"},
		{"bad process", []string{"-models", "resnet50", "-process", "bursty"}, "-process"},
		{"bad ramp", []string{"-models", "resnet50", "-ramp", "10s"}, "-ramp"},
		{"bad memory", []string{"-models", "resnet50", "-memory", "lots"}, "-memory"},
		{"bad sm", []string{"-models", "resnet50", "-sm", "120"}, "-sm"},
		{"bad margin", []string{"-models", "resnet50", "-slo-margin", "2.5"}, "-slo-margin"},
		{"bad model", []string{"-models", "largest:0"}, "models"},
		{"unknown model", []string{"-models", "nosuchnet", "-duration", "1s"}, "nosuchnet"},
		{"missing trace", []string{"-trace", "/nonexistent.csv"}, "trace"},
		{"stray argument", []string{"-models", "resnet50", "extra"}, "unexpected argument"},
		{"unknown flag", []string{"-nope"}, "nope"},
		{"no gpus", []string{"-models", "resnet50", "-gpus", "0"}, "cluster"},
		{"bad name", []string{"-models", "resnet50", "-name", "../up"}, "-name"},
		{"negative min", []string{"-models", "resnet50", "-min", "-3"}, "-min"},
		{"negative max", []string{"-models", "resnet50", "-max", "-1"}, "-max"},
		{"min above max", []string{"-models", "resnet50", "-min", "5", "-max", "2"}, "-min"},
		{"no gpus per node", []string{"-models", "resnet50", "-gpus-per-node", "0"}, "-gpus-per-node"},
		{"negative batch cap", []string{"-models", "resnet50", "-max-batch", "-1"}, "-max-batch"},
		{"zero locality bound", []string{"-models", "resnet50", "-locality-bound", "0"}, "-locality-bound"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			err := simulateCmd(tt.args, &out, &errOut)
			if err == nil || !strings.Contains(err.Error()+errOut.String(), tt.want) {
				t.Errorf("got %v (stderr %q), want an error mentioning %q", err, errOut.String(), tt.want)
			}
		})
	}
}

func TestSimulateHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := simulateCmd([]string{"-h"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range append(sim.ScenarioNames(), "-trace", "-out", sim.TraceHeader) {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("help does not mention %q", want)
		}
	}
}

// A generated run writes its table, CSV files, plots and trace; the trace
// replays to the same table.
func TestSimulateWritesOutputsAndReplaysItsTrace(t *testing.T) {
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "w.csv")
	args := []string{"-models", "resnet50*2,vgg16", "-rate", "30", "-duration", "20s", "-gpus", "2", "-slo-factor", "3.5",
		"-policies", "time-sharing,lb,lalb-o3,faas-gpu", "-quiet", "-out", dir, "-write-trace", tracePath, "-per-function"}
	var out, errOut bytes.Buffer
	if err := simulateCmd(args, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	text := out.String()
	for _, want := range []string{"policy", "faas-gpu", "lalb-o3", "SLO viol %", "packing lower bound", "vs time-sharing", "vs lb", "simulated requests per wall second"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	for _, f := range []string{"run-summary.csv", "run-series.csv", "run-cdf.csv", "run-functions.csv", "run-latency-cdf.svg", "run-gpus.svg", "run-sm.svg", "run-throughput.svg"} {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil || info.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "run-gpus.svg"))
	if !bytes.Contains(svg, []byte("<svg")) {
		t.Error("run-gpus.svg is not SVG")
	}
	table := func(s string) string { // the table and comparisons, not the timings
		return s[strings.Index(s, "  policy"):strings.Index(s, "simulator:")]
	}
	var replay bytes.Buffer
	if err := simulateCmd([]string{"-trace", tracePath, "-duration", "20s", "-gpus", "2", "-slo-factor", "3.5",
		"-policies", "time-sharing,lb,lalb-o3,faas-gpu", "-quiet", "-per-function"}, &replay, &errOut); err != nil {
		t.Fatal(err)
	}
	if table(replay.String()) != table(text) {
		t.Errorf("the trace replays differently:\n%s\nvs\n%s", table(replay.String()), table(text))
	}
}

func TestSimulateScenarioWithOverrides(t *testing.T) {
	var out, errOut bytes.Buffer
	err := simulateCmd([]string{"-scenario", "consolidation", "-duration", "30s", "-warmup", "5s", "-policies", "time-sharing,faas-gpu", "-quiet"}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "scenario consolidation:") || !strings.Contains(out.String(), "8 functions") {
		t.Errorf("output:\n%s", out.String())
	}
}

// Regressions of the simulate verb, each seen in the output of a run.
func TestSimulateFlagDefects(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "long.csv")
	inventory := filepath.Join(dir, "inv.yaml")
	files := map[string]string{
		trace: sim.TraceHeader + "\n0.5,f,resnet50\n100.2,f,resnet50\n",
		inventory: "version: faas-gpu/v1\nnodes:\n- name: big\n  gpus:\n  - uuid: GPU-a\n    product: Tesla V100-SXM2-16GB\n" +
			"    memory: 16Gi\n    smCount: 80\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		// The default -duration of 1m was applied after -trace reset it.
		{"a trace runs for its length", []string{"-trace", trace}, "2 requests over 1m41s"},
		// Even arrivals over 2m: 10 req/s plus 20 more in the burst from
		// 60 s to 70 s is 1,400 requests (one more where the rate steps
		// down at 70 s); the bug replaced 10 by 20: 1,300.
		{"a burst is on top of the rate", []string{"-models", "resnet50", "-process", "even", "-rate", "10", "-burst-rate", "20", "-duration", "2m"}, "1401 requests over 2m0s"},
		// The default -gpus dropped an -inventory given without -scenario.
		{"-inventory without a scenario", []string{"-models", "resnet50", "-inventory", inventory, "-duration", "5s"}, "(1 GPUs)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if err := simulateCmd(append(tt.args, "-quiet", "-policies", "lb"), &out, &errOut); err != nil {
				t.Fatalf("%v\n%s", err, errOut.String())
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Errorf("output lacks %q:\n%s", tt.want, out.String())
			}
		})
	}
}

// Regression: with no measured request the latency plot panicked (exit 2)
// and the run's files were incomplete. Now every file is written, the run
// succeeds, and a note says why the latency plot is empty.
func TestSimulateOutWithoutMeasuredRequests(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	err := simulateCmd([]string{"-models", "resnet50", "-duration", "5s", "-warmup", "10s", "-quiet", "-policies", "lb,faas-gpu", "-out", dir}, &out, &errOut)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	for _, f := range []string{"run-summary.csv", "run-series.csv", "run-cdf.csv", "run-functions.csv", "run-latency-cdf.svg", "run-gpus.svg", "run-sm.svg", "run-throughput.svg"} {
		if info, err := os.Stat(filepath.Join(dir, f)); err != nil || info.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(out.String(), "no measured request completed") {
		t.Errorf("no note about the empty latency plot:\n%s", out.String())
	}
}
