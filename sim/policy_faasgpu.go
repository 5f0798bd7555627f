package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// faasGPU is ours, everything on, driven the way the local backend drives
// the scheduler package (local/backend.go, place.go, autoscale.go):
//
//   - a function's slice, batch and autoscaler menu come from
//     scheduler.PlanFunction on its profile (the most throughput per SM %
//     among slices whose batch latency is at most SLO/2, so that a request
//     waiting out a running batch still meets the SLO; with the profile's
//     batch sizes);
//   - replicas are booked by scheduler.Allocator.Place with the model as a
//     locality hint (on a GPU that holds it, else a node that loaded it,
//     else best fit), within SM % and memory;
//   - every second scheduler.Autoscale, fed by scheduler.RateEstimator and
//     the function's backlog (requests waiting beyond the running batches),
//     adds replicas (promoting a warm one of the same slice first: no load)
//     and retires the least efficient ones to warm replicas
//     (Allocator.Demote: model kept in memory, SM freed), which expire after
//     the warm TTL or are evicted by placements that need their memory;
//   - requests go to the replica with fewest outstanding
//     (scheduler.LeastOutstanding); a replica batches up to its batch size
//     from what waits for it. A function serving many models (X-Model) is
//     dispatched as the provider does: LALB with out-of-order dispatch (see
//     dispatcher), one request at a time per replica.
type faasGPU struct {
	alloc   *scheduler.Allocator
	fns     []*fgFn
	byID    map[string]*replica
	pending []*replica
	// promoted and placed count warm replicas brought back and replicas
	// placed, for tests.
	promoted, placed int
}

type fgFn struct {
	idx         int
	spec        scheduler.Function
	plan        scheduler.Plan
	model       int
	multi       bool
	live        []*replica // the autoscaler's replicas: pending, starting, serving
	warm        []*replica // scaled down, model kept; most recently idled last
	waiting     fifo       // requests that found no serving replica
	d           dispatcher
	rate        scheduler.RateEstimator
	requests    uint64
	lastRequest time.Time
	lastUp      time.Time
	lastDown    time.Time
}

func (p *faasGPU) start(e *Engine) error {
	p.alloc = scheduler.NewAllocator(e.inv, e.cache)
	p.byID = map[string]*replica{}
	e.tickEvery = e.opts.Tick
	store := e.store
	for i := range e.wl.Functions {
		wf := &e.wl.Functions[i]
		spec := scheduler.Function{
			Deployment: types.FunctionDeployment{Service: wf.Name, Namespace: "openfaas-fn"},
			GPU:        gpu.Request{Model: wf.Model, SLO: e.planSLO(wf.SLO), SMPercent: wf.SMPercent, MemoryBytes: wf.MemoryBytes},
			Scale:      scheduler.ScalePolicy{Min: wf.minReplicas(), Max: wf.maxReplicas(), ZeroDuration: scheduler.DefaultZeroDuration},
		}
		plan, err := scheduler.PlanFunction(spec, store, e.product)
		if err != nil {
			return fmt.Errorf("function %s: %w", wf.Name, err)
		}
		if plan, err = capBatch(plan, spec.GPU.SLO, wf.SMPercent > 0, e.opts.MaxBatch); err != nil {
			return fmt.Errorf("function %s: %w", wf.Name, err)
		}
		f := &fgFn{idx: i, spec: spec, plan: plan, model: e.fnModel[i], multi: wf.MultiModel(),
			d: dispatcher{mode: dispatchO3, bound: e.opts.LocalityBound}}
		p.fns = append(p.fns, f)
		for range spec.Scale.InitialReplicas() {
			p.want(e, f, plan.Base)
		}
	}
	p.reconcile(e, true)
	return nil
}

// capBatch applies a batch cap (Options.MaxBatch) the way PlanFunction
// would choose under it: scheduler.ChooseSlice (the same SLO/2 rule) with
// ChooseOptions.MaxBatch, and the autoscaler's menu without larger
// batches. An explicit SM % is already planned at batch 1.
func capBatch(plan scheduler.Plan, slo time.Duration, explicitSM bool, maxBatch int) (scheduler.Plan, error) {
	if maxBatch <= 0 || plan.Profile == nil || explicitSM {
		return plan, nil
	}
	c, err := scheduler.ChooseSlice(plan.Profile, slo, scheduler.ChooseOptions{MaxBatch: maxBatch, Fallback: plan.Fallback})
	if err != nil {
		return plan, err
	}
	plan.Base = scheduler.SliceConfig{SMPercent: c.SMPercent, Batch: c.Batch, Throughput: c.Throughput}
	plan.Request.SMPercent = c.SMPercent
	plan.Decision = c.Explanation
	plan.Configs = []scheduler.SliceConfig{plan.Base}
	if slo > 0 {
		plan.Configs = scheduler.ConfigsFromProfile(plan.Profile, slo, maxBatch)
	}
	return plan, nil
}

// want adds a replica of slice c, pending until reconcile places it.
func (p *faasGPU) want(e *Engine, f *fgFn, c scheduler.SliceConfig) {
	model := f.model
	if f.multi {
		model = -1 // loads what its requests name
	}
	r := e.newReplica(f.idx, model)
	r.cfg = c
	r.batch = e.batchCap(max(c.Batch, 1))
	if f.multi {
		r.batch = 1
	}
	f.live = append(f.live, r)
	p.pending = append(p.pending, r)
	p.byID[r.id] = r
}

// reconcile places pending replicas, oldest first (local.reconcileLocked).
func (p *faasGPU) reconcile(e *Engine, prewarmed bool) {
	kept := p.pending[:0]
	for _, r := range p.pending {
		if r.state != repPending {
			continue
		}
		f := p.fns[r.fn]
		pl, evicted, err := p.alloc.Place(r.id, f.plan.RequestFor(r.cfg), scheduler.Hints{Model: f.plan.Request.Model, Now: e.clock(), Speed: p.speedFor(e, f, r.cfg)})
		if err != nil {
			kept = append(kept, r)
			continue
		}
		for _, id := range evicted {
			p.evicted(e, id)
		}
		p.placed++
		r.sm, r.mem = pl.Slice.SMPercent, pl.Slice.MemoryBytes
		r.share = r.sm * 100
		e.launch(r, e.byUUID[pl.GPUs[0]], p.modelCapacity(e, f, pl.Slice.MemoryBytes), prewarmed, true)
	}
	clear(p.pending[len(kept):])
	p.pending = kept
}

// modelCapacity is what a replica's memory holds of models once its CUDA
// context is paid (local.modelCapacity).
func (p *faasGPU) modelCapacity(e *Engine, f *fgFn, mem int64) int64 {
	m := e.models[f.model]
	return max(mem-(m.memory-m.size), 0)
}

// speedFor is the profiled throughput of slice c on each product
// (local.speedFor).
func (p *faasGPU) speedFor(e *Engine, f *fgFn, c scheduler.SliceConfig) func(string) float64 {
	return func(product string) float64 {
		prof, fb, ok := e.store.Lookup(f.plan.Request.Model, product)
		if !ok || fb.Used() {
			return 0
		}
		lat, err := scheduler.LatencyAt(prof, max(c.Batch, 1), float64(c.SMPercent))
		if err != nil {
			return 0
		}
		return float64(max(c.Batch, 1)) * 1000 / lat
	}
}

// evicted forgets a warm replica the allocator stopped to free memory
// (it released the booking and told the cache).
func (p *faasGPU) evicted(e *Engine, id string) {
	r := p.byID[id]
	if r == nil {
		return
	}
	f := p.fns[r.fn]
	f.warm = slices.DeleteFunc(f.warm, func(x *replica) bool { return x == r })
	delete(p.byID, id)
	e.release(r)
}

func (p *faasGPU) arrive(e *Engine, n int32) {
	f := p.fns[e.wl.Arrivals[n].Fn]
	f.requests++
	f.lastRequest = e.clock()
	if len(f.live) == 0 { // scaled to zero: the gateway asks for one
		p.scaleFromZero(e, f)
	}
	if f.multi {
		f.d.arrive(e, f.live, n)
		return
	}
	if !e.routeLeastOutstanding(f.live, n) {
		f.waiting.push(n)
	}
}

func (p *faasGPU) scaleFromZero(e *Engine, f *fgFn) {
	if !p.promote(e, f, f.plan.Base, false) {
		p.want(e, f, f.plan.Base)
		p.reconcile(e, false)
	}
	f.lastUp = e.clock()
}

func (p *faasGPU) ready(e *Engine, r *replica) {
	f := p.fns[r.fn]
	if f.multi {
		f.d.drain(e, f.live)
		return
	}
	for f.waiting.len() > 0 {
		if !e.routeLeastOutstanding(f.live, f.waiting.pop()) {
			panic("sim: a serving replica refused a request")
		}
	}
	e.serveQueue(r)
}

func (p *faasGPU) idle(e *Engine, r *replica) {
	f := p.fns[r.fn]
	switch r.state {
	case repGone, repWarm:
	case repRetired:
		if r.queue.len() > 0 {
			e.serveQueue(r) // out of routing, it finishes what it was sent
		} else {
			r.state = repWarm
		}
	default:
		if f.multi {
			f.d.drain(e, f.live)
		} else {
			e.serveQueue(r)
		}
	}
}

func (p *faasGPU) tick(e *Engine) {
	now := e.clock()
	for _, id := range e.cache.Expired(now, e.opts.WarmTTL) {
		r := p.byID[id]
		if r == nil {
			continue
		}
		if err := p.alloc.Release(id, now); err == nil {
			e.cache.CountEviction(true)
		}
		p.evicted(e, id)
	}
	for _, f := range p.fns {
		rate := f.rate.Observe(f.requests, now)
		if !f.plan.Autoscaled && !f.spec.Scale.Zero {
			continue
		}
		in := scheduler.AutoscaleInput{Now: now, Rate: rate, LastRequest: f.lastRequest, Policy: f.spec.Scale,
			LastScaleUp: f.lastUp, LastScaleDown: f.lastDown}
		if !e.opts.NoBacklog {
			in.Backlog = f.backlog()
		}
		if f.plan.Autoscaled {
			in.Configs = f.plan.Configs
		}
		for _, r := range f.live {
			in.Replicas = append(in.Replicas, scheduler.ReplicaCapacity{ID: r.id, Config: r.cfg})
		}
		d := scheduler.Autoscale(in, e.opts.Autoscale)
		for _, id := range d.Remove {
			if r := p.byID[id]; r != nil {
				p.retire(e, f, r)
			}
			f.lastDown = now
		}
		for _, c := range d.Add {
			if !p.promote(e, f, c, true) {
				p.want(e, f, c)
			}
			f.lastUp = now
		}
	}
	p.reconcile(e, false)
}

// backlog is what waits for f beyond what its replicas serve at once, as
// the local backend measures it (local.backlogLocked): requests routed to a
// replica that wait for its running batch, plus those queued for a
// replica (none serving yet, or the multi-model dispatcher's queue).
func (f *fgFn) backlog() float64 {
	n := f.waiting.len() + f.d.queued()
	for _, r := range f.live {
		n += r.queue.len()
	}
	return float64(n)
}

// retire scales r down to a warm replica (local.retireLocked).
func (p *faasGPU) retire(e *Engine, f *fgFn, r *replica) {
	f.live = slices.DeleteFunc(f.live, func(x *replica) bool { return x == r })
	if r.state == repPending {
		r.state = repGone
		delete(p.byID, r.id)
		return
	}
	if err := p.alloc.Demote(r.id, e.clock()); err != nil {
		panic(fmt.Sprintf("sim: demote %s: %v", r.id, err))
	}
	e.retire(r)
	f.warm = append(f.warm, r)
	if r.started && !r.busy && r.queue.len() == 0 {
		r.state = repWarm
	}
}

// promote brings back the most recently idled warm replica (of slice c
// when exact) whose SM share is still free (local.promoteLocked).
func (p *faasGPU) promote(e *Engine, f *fgFn, c scheduler.SliceConfig, exact bool) bool {
	for i := len(f.warm) - 1; i >= 0; i-- {
		r := f.warm[i]
		if exact && r.cfg.SMPercent != c.SMPercent {
			continue
		}
		if err := p.alloc.Promote(r.id); err != nil {
			continue
		}
		f.warm = slices.Delete(f.warm, i, i+1)
		f.live = append(f.live, r)
		p.promoted++
		if !r.started {
			r.state = repStarting // its pending ready event puts it in service
			return true
		}
		r.state = repServing
		e.activate(r, true)
		p.ready(e, r)
		return true
	}
	return false
}

func (p *faasGPU) compute(e *Engine, r *replica, m int, k int) time.Duration {
	info := e.models[m]
	b := info.batches[len(info.batches)-1]
	for _, x := range info.batches {
		if x >= k {
			b = x
			break
		}
	}
	lat, err := scheduler.LatencyAt(info.prof, b, float64(r.sm))
	if err != nil {
		panic(fmt.Sprintf("sim: %s at batch %d, %d%% SM: %v", info.name, b, r.sm, err))
	}
	return ms(lat)
}
