// Package parity is one scripted scenario that every runner of the
// lifecycle core plays — the local backend, the Kubernetes backend
// (test/k8s) and the simulator — and the way their decisions are compared:
// slices, placements, warm replicas and scale actions, step by step.
package parity

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/faas-gpu/faas-gpu/sim"
	"github.com/openfaas/faas-provider/types"
)

// Runner is one way the lifecycle core runs: a backend, or the simulator.
type Runner interface {
	Deploy(t testing.TB, f Fn, at time.Time)
	Count(name string, n int, at time.Time)
	Tick(at time.Time)
	SetInventory(inv gpu.Inventory, at time.Time)
	Remove(t testing.TB, name string, at time.Time)
	Report(t testing.TB) scheduler.ClusterReport
}

// Fn is a scenario's function, as a workload and a deployment describe it.
type Fn struct {
	Name, Model string
	SLO         time.Duration
	SM          int
	Memory      int64
	Min, Max    int
}

// Spec is the function as the provider API deploys it.
func (f Fn) Spec() scheduler.Function {
	return scheduler.Function{
		Deployment: types.FunctionDeployment{Service: f.Name, Namespace: "openfaas-fn", Image: "img"},
		GPU:        gpu.Request{Model: f.Model, SLO: f.SLO, SMPercent: f.SM, MemoryBytes: f.Memory},
		Scale:      scheduler.ScalePolicy{Min: f.Min, Max: f.Max, ZeroDuration: scheduler.DefaultZeroDuration},
	}
}

// Functions are the scenario's functions.
func Functions() []Fn { return []Fn{rn, fixed, late} }

// SimWorkload is the scenario's functions as the simulator's workload.
func SimWorkload() *sim.Workload {
	var wl sim.Workload
	for _, f := range Functions() {
		wl.Functions = append(wl.Functions, sim.Function{Name: f.Name, Model: f.Model, SLO: f.SLO, SMPercent: f.SM, MemoryBytes: f.Memory, Min: f.Min, Max: f.Max})
	}
	return &wl
}

// Cluster is the named nodes, 2 V100s each.
func Cluster(nodes ...string) gpu.Inventory {
	inv := gpu.Inventory{Source: "parity"}
	for _, n := range nodes {
		node := gpu.Node{Name: n}
		for g := range 2 {
			node.GPUs = append(node.GPUs, gpu.Device{UUID: fmt.Sprintf("GPU-%s-%d", n, g), Node: n, Index: g,
				Product: gpu.V100Product, MemoryBytes: 16 << 30, SMCount: 80})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	return inv
}

// Step is one moment of the scenario: what happens at second At.
type Step struct {
	At   int
	Name string
	Do   func(t testing.TB, r Runner, at time.Time)
}

var (
	rn    = Fn{Name: "rn", Model: "resnet50", SLO: 200 * time.Millisecond, Min: 1, Max: 8}
	fixed = Fn{Name: "fixed", Model: "mobilenet_v2", SM: 60, Memory: 4 << 30, Min: 3, Max: 3}
	late  = Fn{Name: "late", Model: "vgg16", SLO: 400 * time.Millisecond, Min: 1, Max: 4}
)

// Scenario is the script: deploys, a load step on rn and its fall, a
// function deployed mid-way, a node lost under load and back, a delete,
// and the quiet after.
func Scenario() []Step {
	var steps []Step
	steps = append(steps,
		Step{0, "deploy rn", func(t testing.TB, r Runner, at time.Time) { r.Deploy(t, rn, at) }},
		Step{0, "deploy fixed", func(t testing.TB, r Runner, at time.Time) { r.Deploy(t, fixed, at) }},
	)
	load := func(s int) int {
		switch {
		case s >= 10 && s < 40:
			return 600
		case s >= 40 && s < 50:
			return 150
		}
		return 0
	}
	for s := 1; s <= 130; s++ {
		switch s {
		case 20:
			steps = append(steps, Step{s, "deploy late", func(t testing.TB, r Runner, at time.Time) { r.Deploy(t, late, at) }})
		case 35:
			steps = append(steps, Step{s, "node-b lost", func(t testing.TB, r Runner, at time.Time) { r.SetInventory(Cluster("node-a"), at) }})
		case 60:
			steps = append(steps, Step{s, "node-b back", func(t testing.TB, r Runner, at time.Time) { r.SetInventory(Cluster("node-a", "node-b"), at) }})
		case 100:
			steps = append(steps, Step{s, "delete fixed", func(t testing.TB, r Runner, at time.Time) { r.Remove(t, "fixed", at) }})
		}
		n := load(s)
		steps = append(steps, Step{s, fmt.Sprintf("tick, rn at %d req/s", n), func(t testing.TB, r Runner, at time.Time) {
			r.Count("rn", n, at)
			r.Tick(at)
		}})
	}
	return steps
}

// Decisions is what a report says of the core's decisions, without IDs,
// times or readiness: per GPU, each replica's function, slice and whether
// it is warm; per function, its count, warm and pending replicas.
func Decisions(rep scheduler.ClusterReport) []string {
	var out []string
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			var reps []string
			for _, r := range g.Replicas {
				s := fmt.Sprintf("%s %d%% %s", r.Function, r.SMPercent, gpu.FormatBytes(r.MemoryBytes))
				if r.Idle {
					s += " warm"
				}
				reps = append(reps, s)
			}
			slices.Sort(reps)
			out = append(out, fmt.Sprintf("%s/%d: [%s]", n.Name, g.Index, strings.Join(reps, ", ")))
		}
	}
	for _, f := range rep.Functions {
		out = append(out, fmt.Sprintf("%s: %d%% batch %d, %d replicas, %d warm, %d pending", f.Name, f.SMPercent, f.Batch, f.Replicas, f.Idle, f.Pending))
	}
	slices.Sort(out)
	return out
}

// Play runs the scenario through every runner, in the order of names,
// and fails at the first step where one decides differently from the
// first. It checks that the scenario exercised what it is about: rn scaled
// out (and, with warm replicas, back to warm ones) and the lost node left
// a replica waiting.
func Play(t testing.TB, t0 time.Time, names []string, runners map[string]Runner, warm bool) {
	t.Helper()
	var most, warmSeen, pending int
	for _, s := range Scenario() {
		at := t0.Add(time.Duration(s.At) * time.Second)
		var first []string
		for i, name := range names {
			s.Do(t, runners[name], at)
			rep := runners[name].Report(t)
			got := Decisions(rep)
			if i == 0 {
				first = got
				for _, f := range rep.Functions {
					pending = max(pending, f.Pending)
					if f.Name == rn.Name {
						most, warmSeen = max(most, f.Replicas), max(warmSeen, f.Idle)
					}
				}
				continue
			}
			if !slices.Equal(got, first) {
				t.Fatalf("second %d, %s: %s and %s decide differently:\n%s:\n  %s\n%s:\n  %s", s.At, s.Name, names[0], name,
					names[0], strings.Join(first, "\n  "), name, strings.Join(got, "\n  "))
			}
		}
	}
	t.Logf("rn: up to %d replicas, %d warm; up to %d pending replicas of a function", most, warmSeen, pending)
	if most < 3 || (warm && warmSeen < 1) || pending < 1 {
		t.Fatalf("the scenario did not exercise scaling and node loss: rn up to %d replicas, %d warm; %d pending", most, warmSeen, pending)
	}
}

// SimRunner is the simulator's faas-gpu policy, driven step by step.
type SimRunner struct{ s *sim.Script }

// NewSimRunner prepares the scenario in the simulator with opts. Every
// replica started is ready by the end of its step, as the local backend's
// emulated workers (with no model load time) and kwok's pods are.
func NewSimRunner(t testing.TB, cat *sim.Catalog, opts sim.Options, t0 time.Time) *SimRunner {
	s, err := sim.NewScript(SimWorkload(), Cluster("node-a", "node-b"), cat, opts, t0)
	if err != nil {
		t.Fatal(err)
	}
	return &SimRunner{s: s}
}

func (r *SimRunner) Deploy(t testing.TB, f Fn, at time.Time) {
	if err := r.s.Deploy(f.Name, at); err != nil {
		t.Fatalf("sim: deploy %s: %v", f.Name, err)
	}
}
func (r *SimRunner) Count(name string, n int, at time.Time)       { r.s.Count(name, n, at) }
func (r *SimRunner) Tick(at time.Time)                            { r.s.Tick(at) }
func (r *SimRunner) SetInventory(inv gpu.Inventory, at time.Time) { r.s.SetInventory(inv, at) }
func (r *SimRunner) Report(t testing.TB) scheduler.ClusterReport  { return r.s.Report() }
func (r *SimRunner) Remove(t testing.TB, name string, at time.Time) {
	if err := r.s.Delete(name, at); err != nil {
		t.Fatalf("sim: delete %s: %v", name, err)
	}
}
