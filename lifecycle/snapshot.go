package lifecycle

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// FunctionView is a function as reports and status show it: plain values,
// safe to read after the caller's lock is released.
type FunctionView struct {
	Key       string
	Spec      scheduler.Function
	Plan      scheduler.Plan
	Desired   int
	CreatedAt time.Time
	// Live are the replicas in service or on their way, oldest first;
	// Warm those kept out of service, most recently idled last.
	Live, Warm []ReplicaView
	Rate       float64
	LastScale  string
	ScaledUp   uint64
	ScaledDown uint64
}

func (fn *function) view() FunctionView {
	v := FunctionView{Key: fn.key, Spec: fn.spec, Plan: fn.plan, Desired: fn.desired, CreatedAt: fn.createdAt,
		Rate: fn.rate.Rate(), LastScale: fn.lastScale, ScaledUp: fn.scaledUp, ScaledDown: fn.scaledDown}
	v.Live = make([]ReplicaView, len(fn.live))
	for i, r := range fn.live {
		v.Live[i] = r.view()
	}
	v.Warm = make([]ReplicaView, len(fn.warm))
	for i, r := range fn.warm {
		v.Warm[i] = r.view()
	}
	return v
}

// Function is one function's view.
func (c *Core) Function(key string) (FunctionView, bool) {
	fn, ok := c.functions[key]
	if !ok {
		return FunctionView{}, false
	}
	return fn.view(), true
}

// Functions are every function's view, oldest first.
func (c *Core) Functions() []FunctionView {
	out := make([]FunctionView, len(c.order))
	for i, fn := range c.order {
		out[i] = fn.view()
	}
	return out
}

// Replica is one replica's view, draining ones included.
func (c *Core) Replica(id string) (ReplicaView, bool) {
	r, ok := c.replicas[id]
	if !ok {
		return ReplicaView{}, false
	}
	return r.view(), true
}

// Usage is every GPU's bookings (scheduler.NodeReports).
func (c *Core) Usage() []scheduler.GPUUsage { return c.alloc.Usage() }

// Live is how many replicas function key has in service or on their way
// (0 for an unknown function): cheap, for a request path that scales from
// zero.
func (c *Core) Live(key string) int {
	if fn, ok := c.functions[key]; ok {
		return len(fn.live)
	}
	return 0
}

// Report is what the core holds, as /system/gpus shows the decisions:
// every GPU with its replicas (named by function, warm ones idle), every
// function with its slice and counts. Backends add what only they know
// (readiness, start-up times, rates); the simulator and the parity tests
// compare it as it is.
func (c *Core) Report() scheduler.ClusterReport {
	rep := scheduler.ClusterReport{}
	owner := map[string]string{}
	for _, fn := range c.order {
		fr := scheduler.FunctionReport{Name: fn.spec.Name(), Namespace: fn.spec.Namespace(), Model: fn.plan.Request.Model,
			SMPercent: fn.plan.Base.SMPercent, Batch: max(fn.plan.Base.Batch, 1), Replicas: fn.desired, Idle: len(fn.warm)}
		for _, r := range fn.live {
			owner[r.id] = fn.key
			if r.placement == nil {
				fr.Pending++
			}
		}
		for _, r := range fn.warm {
			owner[r.id] = fn.key
		}
		rep.Functions = append(rep.Functions, fr)
	}
	rep.Nodes = scheduler.NodeReports(c.alloc.Usage(), c.cache, func(id string, rr *scheduler.ReplicaReport) {
		if k, ok := owner[id]; ok {
			rr.Namespace, rr.Function = splitKey(k)
		}
	})
	return rep
}
