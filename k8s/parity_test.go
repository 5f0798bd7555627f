package k8s

import (
	"slices"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/faas-gpu/faas-gpu/sim"
	"github.com/faas-gpu/faas-gpu/test/parity"
)

// TestParityWithTheSimulator plays test/parity's scenario through the
// Kubernetes backend's state — the lifecycle core with the backend's
// groups and drains, as its control loop drives it, with every drain
// ending as soon as it is asked about (the pods are gone), every demote
// confirmed at once (the pods labelled) and every pod ready at once (as
// kwok's are, reported to the core as the loop does) — and through
// the simulator with the same core options, warm replicas included. They
// decide the same, step by step. The API writes that carry the decisions out are
// test/k8s's business.
func TestParityWithTheSimulator(t *testing.T) {
	cat, err := sim.BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	parity.Play(t, t0, []string{"kubernetes", "sim"}, map[string]parity.Runner{
		"kubernetes": newStateRunner(cat.Store),
		// kwok's pods are ready at once: every replica started is ready by
		// the end of its step on both, as on the local backend; both
		// consolidate and keep standbys.
		"sim": parity.NewSimRunner(t, cat, sim.Options{}, t0),
	}, false)
}

// stateRunner drives a state as the backend does: each operation through
// the core and state.apply, then the drains checked (and ended: kwok's
// pods go at once), the inventory and the ticks as reconcile and
// autoscale pass them.
type stateRunner struct {
	st   *state
	load map[string]*lifecycle.Load
}

func newStateRunner(store *profiles.Store) *stateRunner {
	return &stateRunner{st: newState(parity.Cluster("node-a", "node-b"), coreOptions(store, scheduler.DefaultAutoscaleOptions), nil),
		load: map[string]*lifecycle.Load{}}
}

func (r *stateRunner) settle(now time.Time) {
	// Every booking in service has a ready pod, as kwok's are at once:
	// the loop reports them (a replacement ready retires what it
	// replaces).
	// Each warm replica's pod is labelled at once, as the writer does (a
	// standby's while it starts), and the loop confirms the demote; a
	// standby's pod is ready at once too.
	label := func() {
		for id, pod := range r.st.warmPod {
			if pod == "" {
				r.st.warmPod[id] = "pod-" + id
			}
		}
	}
	label()
	r.st.reportReady(func(_ string, g *group) []string { return append(slices.Clone(g.ids), g.warm...) }, now)
	label()
	r.st.confirmDemotes(now)
	r.st.checkDrains(func(string, string, int) bool { return true }, now)
}

func (r *stateRunner) Deploy(t testing.TB, f parity.Fn, at time.Time) {
	res, err := r.st.core.Deploy(f.Spec(), at)
	if err != nil {
		t.Fatalf("kubernetes: deploy %s: %v", f.Name, err)
	}
	r.st.apply(res, 0, at)
	r.settle(at)
}

func (r *stateRunner) Remove(t testing.TB, name string, at time.Time) {
	res, err := r.st.core.Delete("openfaas-fn", name, at)
	if err != nil {
		t.Fatalf("kubernetes: delete %s: %v", name, err)
	}
	r.st.apply(res, 0, at)
	r.settle(at)
}

func (r *stateRunner) Count(name string, n int, at time.Time) {
	k := fnKey("openfaas-fn", name)
	l := r.load[k]
	if l == nil {
		l = &lifecycle.Load{}
		r.load[k] = l
	}
	if n > 0 {
		l.Requests += uint64(n)
		l.LastRequest = at
	}
}

func (r *stateRunner) Tick(at time.Time) {
	r.st.tick(at, func(k string) lifecycle.Load {
		if l := r.load[k]; l != nil {
			return *l
		}
		return lifecycle.Load{}
	}, false)
	r.settle(at)
}

func (r *stateRunner) SetInventory(inv gpu.Inventory, at time.Time) {
	r.st.setInventory(inv, nil, at)
	r.settle(at)
}

// Report is what the core holds, as the simulator's is built.
func (r *stateRunner) Report(t testing.TB) scheduler.ClusterReport { return r.st.core.Report() }
