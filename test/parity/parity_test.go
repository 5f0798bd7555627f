// Package parity plays one scripted scenario through every runner of the
// lifecycle core and checks that they decide the same: slices, placements,
// warm replicas and scale actions, step by step.
package parity

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/faas-gpu/faas-gpu/sim"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap/zaptest"
)

// runner is one way the lifecycle core runs: a backend, or the simulator.
type runner interface {
	deploy(t *testing.T, f fn, at time.Time)
	count(name string, n int, at time.Time)
	tick(at time.Time)
	setInventory(inv gpu.Inventory, at time.Time)
	remove(t *testing.T, name string, at time.Time)
	report(t *testing.T) scheduler.ClusterReport
}

// fn is a scenario's function, as a workload and a deployment describe it.
type fn struct {
	name, model string
	slo         time.Duration
	sm          int
	memory      int64
	min, max    int
}

func (f fn) spec() scheduler.Function {
	return scheduler.Function{
		Deployment: types.FunctionDeployment{Service: f.name, Namespace: "openfaas-fn", Image: "img"},
		GPU:        gpu.Request{Model: f.model, SLO: f.slo, SMPercent: f.sm, MemoryBytes: f.memory},
		Scale:      scheduler.ScalePolicy{Min: f.min, Max: f.max, ZeroDuration: scheduler.DefaultZeroDuration},
	}
}

// cluster is 2 nodes of 2 V100s each.
func cluster(nodes ...string) gpu.Inventory {
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

// step is one moment of the scenario: what happens at second at.
type step struct {
	at   int
	name string
	do   func(t *testing.T, r runner, at time.Time)
}

var (
	rn    = fn{name: "rn", model: "resnet50", slo: 200 * time.Millisecond, min: 1, max: 8}
	fixed = fn{name: "fixed", model: "mobilenet_v2", sm: 60, memory: 4 << 30, min: 3, max: 3}
	late  = fn{name: "late", model: "vgg16", slo: 400 * time.Millisecond, min: 1, max: 4}
)

// scenario: deploys, a load step on rn and its fall, a function deployed
// mid-way, a node lost under load, a delete, and the quiet after.
func scenario() []step {
	var steps []step
	steps = append(steps,
		step{0, "deploy rn", func(t *testing.T, r runner, at time.Time) { r.deploy(t, rn, at) }},
		step{0, "deploy fixed", func(t *testing.T, r runner, at time.Time) { r.deploy(t, fixed, at) }},
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
			steps = append(steps, step{s, "deploy late", func(t *testing.T, r runner, at time.Time) { r.deploy(t, late, at) }})
		case 35:
			steps = append(steps, step{s, "node-b lost", func(t *testing.T, r runner, at time.Time) { r.setInventory(cluster("node-a"), at) }})
		case 60:
			steps = append(steps, step{s, "node-b back", func(t *testing.T, r runner, at time.Time) { r.setInventory(cluster("node-a", "node-b"), at) }})
		case 100:
			steps = append(steps, step{s, "delete fixed", func(t *testing.T, r runner, at time.Time) { r.remove(t, "fixed", at) }})
		}
		n := load(s)
		steps = append(steps, step{s, fmt.Sprintf("tick, rn at %d req/s", n), func(t *testing.T, r runner, at time.Time) {
			r.count("rn", n, at)
			r.tick(at)
		}})
	}
	return steps
}

// decisions is what a report says of the core's decisions, without IDs,
// times or readiness: per GPU, each replica's function, slice and whether
// it is warm; per function, its count, warm and pending replicas.
func decisions(rep scheduler.ClusterReport) []string {
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

func TestParity(t *testing.T) {
	cat, err := sim.BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	runners := map[string]runner{
		"local": newLocal(t, cat),
		"sim":   newSim(t, cat, t0),
	}
	names := []string{"local", "sim"}
	var most, warm, pending int
	for _, s := range scenario() {
		at := t0.Add(time.Duration(s.at) * time.Second)
		var first []string
		for i, name := range names {
			s.do(t, runners[name], at)
			rep := runners[name].report(t)
			got := decisions(rep)
			if i == 0 {
				first = got
				for _, f := range rep.Functions {
					pending = max(pending, f.Pending)
					if f.Name == rn.name {
						most, warm = max(most, f.Replicas), max(warm, f.Idle)
					}
				}
				continue
			}
			if !slices.Equal(got, first) {
				t.Fatalf("second %d, %s: %s and %s decide differently:\n%s:\n  %s\n%s:\n  %s", s.at, s.name, names[0], name,
					names[0], strings.Join(first, "\n  "), name, strings.Join(got, "\n  "))
			}
		}
	}
	// The scenario must have exercised what it is about: rn scaled out and
	// back to warm replicas, and the lost node left replicas waiting.
	t.Logf("rn: up to %d replicas, %d warm; up to %d pending replicas of a function", most, warm, pending)
	if most < 3 || warm < 1 || pending < 1 {
		t.Fatalf("the scenario did not exercise scaling and node loss: rn up to %d replicas, %d warm; %d pending", most, warm, pending)
	}
}

// localRunner is the local backend with emulated workers, its clock the
// scenario's, its load counted in the proxy's LoadBook.
type localRunner struct {
	b    *local.Backend
	book *handlers.LoadBook
}

func newLocal(t *testing.T, cat *sim.Catalog) *localRunner {
	book := handlers.NewLoadBook()
	b, err := local.New(local.Config{StateDir: t.TempDir(), Inventory: cluster("node-a", "node-b"), Profiles: cat.Store,
		Load: book, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return &localRunner{b: b, book: book}
}

func (l *localRunner) deploy(t *testing.T, f fn, at time.Time) {
	if err := l.b.Deploy(context.Background(), f.spec()); err != nil {
		t.Fatalf("local: deploy %s: %v", f.name, err)
	}
}

func (l *localRunner) count(name string, n int, at time.Time) {
	for range n {
		l.book.Request("openfaas-fn", name, at)
	}
}

func (l *localRunner) tick(at time.Time)                            { l.b.Tick(at) }
func (l *localRunner) setInventory(inv gpu.Inventory, at time.Time) { l.b.SetInventory(inv) }

func (l *localRunner) remove(t *testing.T, name string, at time.Time) {
	if err := l.b.Delete(context.Background(), "openfaas-fn", name); err != nil {
		t.Fatalf("local: delete %s: %v", name, err)
	}
}

func (l *localRunner) report(t *testing.T) scheduler.ClusterReport {
	rep, err := l.b.GPUReport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// simRunner is the simulator's faas-gpu policy, driven step by step.
type simRunner struct{ s *sim.Script }

func newSim(t *testing.T, cat *sim.Catalog, t0 time.Time) *simRunner {
	var wl sim.Workload
	for _, f := range []fn{rn, fixed, late} {
		wl.Functions = append(wl.Functions, sim.Function{Name: f.name, Model: f.model, SLO: f.slo, SMPercent: f.sm, MemoryBytes: f.memory, Min: f.min, Max: f.max})
	}
	s, err := sim.NewScript(&wl, cluster("node-a", "node-b"), cat, sim.Options{}, t0)
	if err != nil {
		t.Fatal(err)
	}
	return &simRunner{s: s}
}

func (r *simRunner) deploy(t *testing.T, f fn, at time.Time) {
	if err := r.s.Deploy(f.name, at); err != nil {
		t.Fatalf("sim: deploy %s: %v", f.name, err)
	}
}
func (r *simRunner) count(name string, n int, at time.Time)       { r.s.Count(name, n, at) }
func (r *simRunner) tick(at time.Time)                            { r.s.Tick(at) }
func (r *simRunner) setInventory(inv gpu.Inventory, at time.Time) { r.s.SetInventory(inv, at) }
func (r *simRunner) report(t *testing.T) scheduler.ClusterReport  { return r.s.Report() }
func (r *simRunner) remove(t *testing.T, name string, at time.Time) {
	if err := r.s.Delete(name, at); err != nil {
		t.Fatalf("sim: delete %s: %v", name, err)
	}
}
