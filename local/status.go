package local

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
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
	for _, v := range b.core.Functions() {
		if v.Spec.Namespace() == ns {
			out = append(out, b.statusLocked(v))
		}
	}
	return out, nil
}

// Status returns one function.
func (b *Backend) Status(ctx context.Context, ns, name string) (types.FunctionStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.core.Function(key(ns, name))
	if !ok {
		return types.FunctionStatus{}, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	return b.statusLocked(v), nil
}

func (b *Backend) statusLocked(v lifecycle.FunctionView) types.FunctionStatus {
	dep := v.Spec.Deployment
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
		Replicas:               uint64(v.Desired),
		CreatedAt:              v.CreatedAt,
	}
	labels := map[string]string{}
	if dep.Labels != nil {
		for k, val := range *dep.Labels {
			labels[k] = val
		}
	}
	if emulated, _ := b.buildStatus(dep); emulated {
		labels[LabelEmulated] = "true"
	}
	if len(labels) > 0 {
		st.Labels = &labels
	}
	st.AvailableReplicas = uint64(len(b.readyLocked(v)))
	return st
}

// readyLocked are v's replicas in service that answer requests now.
func (b *Backend) readyLocked(v lifecycle.FunctionView) []*replica {
	var out []*replica
	for _, rv := range v.Live {
		if r := b.running[rv.ID]; r != nil && r.run != nil && r.run.Ready() {
			out = append(out, r)
		}
	}
	return out
}

// GPUReport describes every GPU, what is booked on it, what waits, and
// each function's slice decision. The backend's lock is held only to copy
// what the report needs; it is built after, so a report of thousands of
// functions holds up no operation.
func (b *Backend) GPUReport(ctx context.Context) (scheduler.ClusterReport, error) {
	b.mu.Lock()
	inv := b.cfg.Inventory
	views := b.core.Functions()
	usage := b.core.Usage()
	// What each function keeps parked, read under the lock, by the index
	// of its view.
	type parking struct {
		ready, target int
		refused       string
	}
	parked := make([]parking, len(views))
	for i, v := range views {
		k := key(v.Spec.Namespace(), v.Spec.Name())
		parked[i].ready, _ = b.core.Parked(k)
		parked[i].target, parked[i].refused = b.core.ParkedTarget(k), b.core.ParkedRefusal(k)
	}
	running := make(map[string]*replica, len(b.running))
	for id, r := range b.running {
		running[id] = r
	}
	b.mu.Unlock()

	rep := scheduler.ClusterReport{Source: inv.Source, Emulated: inv.Emulated,
		Nodes: []scheduler.NodeReport{}, Pending: []scheduler.PendingEntry{}, Functions: []scheduler.FunctionReport{}, Cache: b.cache.Stats(),
		Stats: b.stats.Stats()}
	ready := func(v lifecycle.FunctionView) int {
		n := 0
		for _, rv := range v.Live {
			if r := running[rv.ID]; r != nil && r.run != nil && r.run.Ready() {
				n++
			}
		}
		return n
	}
	owner := map[string]*lifecycle.FunctionView{}
	for i := range views {
		v := &views[i]
		fr := scheduler.FunctionReport{
			Name: v.Spec.Name(), Namespace: v.Spec.Namespace(), Model: v.Plan.Request.Model,
			SMPercent: v.Plan.Base.SMPercent, MemoryBytes: v.Plan.Request.MemoryBytes, Batch: max(v.Plan.Base.Batch, 1),
			Autoscaled: v.Plan.Autoscaled, Decision: v.Plan.Decision, Rate: v.Rate,
			Replicas: v.Desired, Ready: ready(*v), Idle: len(v.Warm), LastScale: v.LastScale,
			Parked: parked[i].ready, ParkedTarget: parked[i].target, ParkedRefused: parked[i].refused,
		}
		if v.Plan.Request.SLO > 0 {
			fr.SLO = v.Plan.Request.SLO.String()
		}
		_, fr.Problem = b.buildStatus(v.Spec.Deployment)
		if fr.Problem == "" {
			fr.Problem = unreadyReason(v, running)
		}
		for _, r := range v.Live {
			owner[r.ID] = v
			if r.Placement == nil {
				fr.Pending++
				rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: r.ID, Function: v.Spec.Name(), Namespace: v.Spec.Namespace(),
					Reason: r.Reason, ReasonCode: r.ReasonCode, Since: r.PendingSince})
				continue
			}
			// Booked, but its process waits for a fixed port another
			// replica holds: pending to whoever reads the report.
			if b.cfg.Templates != nil {
				if why, ok := b.cfg.Templates.Waiting(r.ID); ok {
					fr.Pending++
					rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: r.ID, Function: v.Spec.Name(), Namespace: v.Spec.Namespace(),
						Reason: why, ReasonCode: scheduler.NoFitPort, Since: r.PendingSince})
				}
			}
		}
		for _, r := range v.Warm {
			owner[r.ID] = v
		}
		rep.Functions = append(rep.Functions, fr)
		if v.Plan.Autoscaled || v.Spec.Scale.Zero || v.ScaledUp+v.ScaledDown > 0 {
			rep.Stats.Autoscaler = append(rep.Stats.Autoscaler, scheduler.ScaleActions{
				Function: v.Spec.Name(), Namespace: v.Spec.Namespace(), Up: v.ScaledUp, Down: v.ScaledDown})
		}
	}
	rep.Nodes = scheduler.NodeReports(usage, b.cache, func(id string, rr *scheduler.ReplicaReport) {
		v, ok := owner[id]
		if !ok {
			return
		}
		rr.Function, rr.Namespace = v.Spec.Name(), v.Spec.Namespace()
		r := running[id]
		// Ready once the backend has recorded it so (readiedLocked, which
		// the start-up watch runs up to startupPoll after the process
		// first answers): a report never shows a replica ready without
		// its start-up time, nor ready before the core holds it ready.
		rr.Ready = !rr.Idle && r != nil && r.run != nil && r.readyAfter.Load() > 0 && r.run.Ready()
		if r != nil {
			rr.Emulated = r.emulated
			if d := r.readyAfter.Load(); d > 0 {
				sec := time.Duration(d).Seconds()
				rr.ReadyAfterSeconds = &sec
			}
			if l := r.modelLoads.Load(); l != nil {
				rr.ModelLoadSeconds = *l
			}
		}
	})
	return rep, nil
}

// unreadyReason is what a replica of v in service that is not ready says
// about why (its readiness path's answer), for the function's problem.
func unreadyReason(v *lifecycle.FunctionView, running map[string]*replica) string {
	for _, rv := range v.Live {
		r := running[rv.ID]
		if r == nil || r.run == nil || r.run.Ready() {
			continue
		}
		if u, ok := r.run.(interface{ Unready() string }); ok {
			if why := u.Unready(); why != "" {
				return "replica " + rv.ID + " is not ready: " + why
			}
		}
	}
	return ""
}
