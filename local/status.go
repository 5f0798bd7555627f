package local

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// List returns the functions of a namespace.
func (b *Backend) List(ctx context.Context, ns string) ([]types.FunctionStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.namespaces[ns]; !ok {
		return nil, &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist", ns)}
	}
	var out []types.FunctionStatus
	for _, fn := range b.sortedFunctionsLocked() {
		if fn.spec.Namespace() == ns {
			out = append(out, b.statusLocked(fn))
		}
	}
	return out, nil
}

// Status returns one function.
func (b *Backend) Status(ctx context.Context, ns, name string) (types.FunctionStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		return types.FunctionStatus{}, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	return b.statusLocked(fn), nil
}

func (b *Backend) statusLocked(fn *function) types.FunctionStatus {
	dep := fn.spec.Deployment
	st := types.FunctionStatus{
		Name:                   dep.Service,
		Image:                  dep.Image,
		Namespace:              dep.Namespace,
		EnvProcess:             dep.EnvProcess,
		EnvVars:                dep.EnvVars,
		Constraints:            dep.Constraints,
		Secrets:                dep.Secrets,
		Annotations:            dep.Annotations,
		Limits:                 dep.Limits,
		Requests:               dep.Requests,
		ReadOnlyRootFilesystem: dep.ReadOnlyRootFilesystem,
		Replicas:               uint64(fn.desired),
		CreatedAt:              fn.createdAt,
	}
	labels := map[string]string{}
	if dep.Labels != nil {
		for k, v := range *dep.Labels {
			labels[k] = v
		}
	}
	if processOf(dep) == "" {
		labels[LabelEmulated] = "true"
	}
	if len(labels) > 0 {
		st.Labels = &labels
	}
	st.AvailableReplicas = uint64(readyCount(fn))
	return st
}

func readyCount(fn *function) int {
	n := 0
	for _, r := range fn.replicas {
		if r.run != nil && r.run.Ready() {
			n++
		}
	}
	return n
}

// ReadyEndpoints lists the replicas in service that answer requests now,
// marking those holding model ("" for the function's own). Each call is one
// request for the function: the autoscaler's rate counts them.
func (b *Backend) ReadyEndpoints(ns, name, model string) ([]scheduler.Endpoint, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		return nil, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	fn.requests.Add(1)
	fn.lastRequest.Store(time.Now().UnixNano())
	if model == "" {
		model = fn.plan.Request.Model
	}
	eps := make([]scheduler.Endpoint, 0, len(fn.replicas))
	for _, r := range fn.replicas {
		if r.run != nil && r.run.Ready() {
			eps = append(eps, scheduler.Endpoint{ID: r.id, URL: r.run.URL(), InFlight: &r.inFlight, Holds: b.cache.Holds(r.id, model), Models: len(b.cache.Models(r.id))})
		}
	}
	return eps, nil
}

// Replicas lists the replicas in service that answer requests now,
// without counting a request.
func (b *Backend) Replicas(ns, name string) ([]scheduler.Endpoint, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		return nil, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	eps := make([]scheduler.Endpoint, 0, len(fn.replicas))
	for _, r := range fn.replicas {
		if r.run != nil && r.run.Ready() {
			eps = append(eps, scheduler.Endpoint{ID: r.id, URL: r.run.URL(), InFlight: &r.inFlight, Models: len(b.cache.Models(r.id))})
		}
	}
	return eps, nil
}

// Holds reports whether a replica has model in its GPU memory.
func (b *Backend) Holds(replicaID, model string) bool { return b.cache.Holds(replicaID, model) }

// GPUReport describes every GPU, what is booked on it, what waits, and
// each function's slice decision.
func (b *Backend) GPUReport(ctx context.Context) (scheduler.ClusterReport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	type owner struct {
		fn *function
		r  *replica
	}
	owners := map[string]owner{}
	rep := scheduler.ClusterReport{Source: b.cfg.Inventory.Source, Emulated: b.cfg.Inventory.Emulated,
		Nodes: []scheduler.NodeReport{}, Pending: []scheduler.PendingEntry{}, Functions: []scheduler.FunctionReport{}, Cache: b.cache.Stats(),
		Stats: b.stats.Stats()}
	for _, fn := range b.sortedFunctionsLocked() {
		fr := scheduler.FunctionReport{
			Name: fn.spec.Name(), Namespace: fn.spec.Namespace(), Model: fn.plan.Request.Model,
			SMPercent: fn.plan.Base.SMPercent, MemoryBytes: fn.plan.Request.MemoryBytes, Batch: max(fn.plan.Base.Batch, 1),
			Autoscaled: fn.plan.Autoscaled, Decision: fn.plan.Decision, Rate: fn.rate.Rate(),
			Replicas: fn.desired, Ready: readyCount(fn), Idle: len(fn.idle), LastScale: fn.lastScale,
		}
		if fn.plan.Request.SLO > 0 {
			fr.SLO = fn.plan.Request.SLO.String()
		}
		for _, r := range fn.replicas {
			owners[r.id] = owner{fn, r}
			if r.placement == nil {
				fr.Pending++
				rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: r.id, Function: fn.spec.Name(), Namespace: fn.spec.Namespace(),
					Reason: r.reason, ReasonCode: r.reasonCode, Since: r.pendingSince})
			}
		}
		for _, r := range fn.idle {
			owners[r.id] = owner{fn, r}
		}
		rep.Functions = append(rep.Functions, fr)
		if fn.plan.Autoscaled || fn.spec.Scale.Zero || fn.scaledUp+fn.scaledDown > 0 {
			rep.Stats.Autoscaler = append(rep.Stats.Autoscaler, scheduler.ScaleActions{
				Function: fn.spec.Name(), Namespace: fn.spec.Namespace(), Up: fn.scaledUp, Down: fn.scaledDown})
		}
	}
	rep.Nodes = scheduler.NodeReports(b.alloc.Usage(), b.cache, func(id string, rr *scheduler.ReplicaReport) {
		if o, ok := owners[id]; ok {
			rr.Function, rr.Namespace = o.fn.spec.Name(), o.fn.spec.Namespace()
			rr.Ready = !rr.Idle && o.r.run != nil && o.r.run.Ready()
			rr.Emulated = o.r.emulated
			if d := o.r.readyAfter.Load(); d > 0 {
				s := time.Duration(d).Seconds()
				rr.ReadyAfterSeconds = &s
			}
		}
	})
	return rep, nil
}
