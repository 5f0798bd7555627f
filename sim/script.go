package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Script drives the faas-gpu policy — the provider's lifecycle core and
// the effects it asks for, carried out on the engine's replicas — one step
// at a time, the way a backend is driven: functions deployed and removed
// by name, requests counted (not served), ticks, GPUs lost. No event loop
// runs, so replicas are placed and started, ready by the end of each step,
// but serve nothing. It is how
// test/parity plays one scenario through the simulator beside the local
// and Kubernetes backends.
type Script struct {
	e  *Engine
	p  *faasGPU
	t0 time.Time
}

// NewScript prepares wl's functions (none deployed yet; its arrivals are
// not used) on inv. Times given to the script's steps are measured from t0.
func NewScript(wl *Workload, inv gpu.Inventory, cat *Catalog, opts Options, t0 time.Time) (*Script, error) {
	e, err := newEngine("faas-gpu", wl, inv, cat, opts)
	if err != nil {
		return nil, err
	}
	p := &faasGPU{}
	e.pol = p
	p.setup(e)
	return &Script{e: e, p: p, t0: t0}, nil
}

func (s *Script) at(t time.Time) { s.e.now = max(t.Sub(s.t0), 0) }

func (s *Script) index(name string) (int, error) {
	for i, f := range s.e.wl.Functions {
		if f.Name == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no function %q in the workload", name)
}

// Deploy deploys the workload's function name at t.
func (s *Script) Deploy(name string, t time.Time) error {
	i, err := s.index(name)
	if err != nil {
		return err
	}
	s.at(t)
	if err := s.p.deploy(s.e, i, s.e.clock(), false); err != nil {
		return err
	}
	s.readyAll()
	return nil
}

// Delete removes function name at t.
func (s *Script) Delete(name string, t time.Time) error {
	s.at(t)
	res, err := s.p.core.Delete("openfaas-fn", name, s.e.clock())
	if err != nil {
		return err
	}
	s.p.apply(s.e, res, false)
	s.readyAll()
	return nil
}

// Count counts n requests of function name arriving at t, as the
// provider's proxy does.
func (s *Script) Count(name string, n int, t time.Time) {
	f := s.p.byFn[lifecycle.Key("openfaas-fn", name)]
	if f == nil || n <= 0 {
		return
	}
	s.at(t)
	f.requests += uint64(n)
	f.lastRequest = s.e.clock()
}

// Tick runs the core's Tick at t (a scripted step is a tick, whatever the
// Rise interval).
func (s *Script) Tick(t time.Time) {
	s.at(t)
	s.p.pass(s.e, s.p.core.Tick)
	s.readyAll()
}

// readyAll tells the core that every replica started is ready, as the
// local backend's emulated workers are at once with no model load time
// (test/parity gives them none) and the Kubernetes
// backend's pods on kwok (no event loop runs here to bring a start-up to
// its end): a replacement then retires what it replaces within the same
// step, on every runner.
func (s *Script) readyAll() {
	for _, f := range s.p.fns {
		if f == nil {
			continue
		}
		for _, r := range slices.Clone(f.live) {
			s.p.apply(s.e, s.p.core.ReplicaReady(r.id, s.e.clock()), false)
		}
	}
}

// SetInventory tells the core the cluster's GPUs are now inv (a node
// lost): its replicas there stop and are placed elsewhere.
func (s *Script) SetInventory(inv gpu.Inventory, t time.Time) {
	s.at(t)
	s.p.apply(s.e, s.p.core.SetInventory(inv, s.e.clock()), false)
	s.readyAll()
}

// Report is what the core holds now, as /system/gpus shows it: every GPU
// with its replicas, and every function with its counts.
func (s *Script) Report() scheduler.ClusterReport { return s.p.core.Report() }
