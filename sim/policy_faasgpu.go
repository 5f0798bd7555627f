package sim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// faasGPU is ours, everything on: the provider's own lifecycle core
// (lifecycle.Core, the code the local and Kubernetes backends run) decides
// in virtual time, and this policy only carries out its effects on the
// engine's replicas, as a backend does:
//
//   - a function's slice, batch and autoscaler menu come from
//     scheduler.PlanFunction on its profile (the slices that carry load
//     within the SLO at p99 by the queueing model, scheduler.QueueCapacity;
//     with the profile's batch sizes); a replica added before its load is
//     known gets the smallest of them;
//   - replicas are booked by the core's allocator with the model as a
//     locality hint (on a GPU that holds it, else a node that loaded it,
//     else best fit), within SM % and memory;
//   - every second the core's Tick, fed with the request count and the
//     function's backlog (requests waiting beyond the running batches),
//     adds replicas sized for the load they will carry (promoting a warm
//     one of the same slice first: no load), replaces oversized or small
//     ones by one cheaper one once it is ready (make-before-break, the old
//     ones drain), and retires the least efficient ones to warm replicas (model kept in
//     memory, SM freed), which expire after the warm TTL or are evicted by
//     placements that need their memory; a request for a function scaled
//     to zero scales it to one, as the gateway does;
//   - requests wait in their function's queue and go, as the provider's
//     proxy hands them out (scheduler.Pull), to a serving replica that can
//     start them: fewer outstanding than its batch size, the one that
//     would complete one soonest at its slice's throughput; a replica
//     batches what it was handed. A function serving many models
//     (X-Model) is dispatched by the LALB dispatcher with out-of-order
//     dispatch (see dispatcher), one request at a time per replica.
type faasGPU struct {
	core *lifecycle.Core
	fns  []*fgFn
	byFn map[string]*fgFn
	byID map[string]*replica
	// Pull's scratch, reused: the serving replicas, their slots, the
	// queue's head (pullMulti's on-time requests first, order their
	// indices in the queue) and the grants.
	serving []*replica
	slots   []scheduler.Slot
	head    []scheduler.Waiting
	order   []int
	grants  []scheduler.Grant
	seqs    []int32 // pullMulti's granted requests
	// passes says which of the engine's periodic events is the core's
	// Tick; the others run its Rise pass.
	passes *lifecycle.Passes
	// promoted and placed count warm replicas brought back and replicas
	// placed, for tests.
	promoted, placed int
	// replaced counts replicas retired by a replacement, for tests.
	replaced int
	// parked counts the processes parked, taken the replicas that took
	// one, blind the hand-overs refused as the Kubernetes backend would
	// (the process cannot see the replica's GPU), for tests.
	parked, taken, blind int
	// sees are the GPUs each parked process can be handed, by its ID
	// (Options.ParkedHeldGPUs); none: any of its node's.
	sees map[string][]string
}

type fgFn struct {
	idx         int
	key         string
	spec        scheduler.Function
	model       int
	multi       bool
	live        []*replica // started replicas in service: starting, serving
	warm        []*replica // scaled down, model kept; most recently idled last
	waiting     fifo       // requests no replica could start yet (scheduler.Pull)
	late        fifo       // those of them that can no longer meet the SLO (scheduler.LateAfter)
	d           dispatcher // a multi-model function's queue, with its requests' models
	models      map[string]uint64
	requests    uint64
	lastRequest time.Time
}

func (p *faasGPU) start(e *Engine) error {
	p.setup(e)
	for i := range e.wl.Functions {
		// Deployed in the workload's order: one nanosecond apart, so that
		// the core's oldest-first placement keeps that order.
		if err := p.deploy(e, i, e.clock().Add(time.Duration(i)), true); err != nil {
			return err
		}
	}
	return nil
}

// setup makes the lifecycle core the policy drives.
func (p *faasGPU) setup(e *Engine) {
	p.byID, p.sees = map[string]*replica{}, map[string][]string{}
	p.byFn = map[string]*fgFn{}
	// By workload index, as replicas and arrivals name them; nil until
	// deployed.
	p.fns = make([]*fgFn, len(e.wl.Functions))
	// The engine's periodic event comes as the provider's loop wakes
	// (lifecycle.Passes; see tick).
	p.passes = lifecycle.NewPasses(e.opts.Tick, e.opts.Rise, e.clock())
	e.tickEvery = p.passes.Interval()
	maxBatch := e.opts.MaxBatch
	p.core = lifecycle.New(e.inv, e.cache, lifecycle.Options{
		Profiles: e.store, Autoscale: e.opts.Autoscale, WarmTTL: e.opts.WarmTTL, NoWarm: e.opts.NoWarm,
		NoConsolidate: e.opts.NoConsolidate,
		NoStandby:     e.opts.NoStandby,
		// Every simulated function's server could take its GPU settings
		// after its start; each is annotated Options.Parked (deploy).
		CanPark: func(scheduler.Function) bool { return true },
		// Numbered as the engine numbers replicas: their order is the
		// creation order.
		NewID: func(name string) string { e.repSeq++; return fmt.Sprintf("%s-%07d", name, e.repSeq) },
		Plan: func(spec scheduler.Function, store *profiles.Store, product string) (scheduler.Plan, error) {
			plan, err := scheduler.PlanFunction(spec, store, product)
			if err != nil {
				return plan, err
			}
			return capBatch(plan, spec.GPU.SLO, spec.GPU.SMPercent > 0, maxBatch)
		},
	})
}

// deploy deploys the workload's function i at at; replicas placed before
// the run (prewarmed) serve at once.
func (p *faasGPU) deploy(e *Engine, i int, at time.Time, prewarmed bool) error {
	wf := &e.wl.Functions[i]
	// The scale bounds and the parked annotation read as the provider
	// reads a deploy's, so that a function the simulator does not annotate
	// parks as one deployed without it would.
	labels := map[string]string{scheduler.LabelScaleMin: strconv.Itoa(wf.minReplicas()), scheduler.LabelScaleMax: strconv.Itoa(wf.maxReplicas())}
	annotations := map[string]string{}
	if e.opts.Parked != "" {
		annotations[scheduler.AnnotationParked] = e.opts.Parked
		// -parked asks it of every function: one whose maximum is lower
		// keeps its maximum, as the count was read before it was an
		// annotation, rather than failing the run.
		if n, err := strconv.Atoi(e.opts.Parked); err == nil && n > wf.maxReplicas() {
			annotations[scheduler.AnnotationParked] = strconv.Itoa(wf.maxReplicas())
		}
	}
	scale, err := scheduler.ParseScalePolicy(labels, annotations)
	if err != nil {
		return fmt.Errorf("function %s: %w", wf.Name, err)
	}
	spec := scheduler.Function{
		Deployment: types.FunctionDeployment{Service: wf.Name, Namespace: "openfaas-fn"},
		GPU:        gpu.Request{Model: wf.Model, SLO: e.planSLO(wf.SLO), SMPercent: wf.SMPercent, MemoryBytes: wf.MemoryBytes},
		Scale:      scale,
	}
	f := &fgFn{idx: i, key: lifecycle.Key(spec.Namespace(), spec.Name()), spec: spec, model: e.fnModel[i], multi: wf.MultiModel(),
		d: dispatcher{mode: dispatchO3, bound: e.opts.LocalityBound}}
	res, err := p.core.Deploy(spec, at)
	if err != nil {
		return fmt.Errorf("function %s: %w", wf.Name, err)
	}
	p.fns[i] = f
	p.byFn[f.key] = f
	p.apply(e, res, prewarmed)
	return nil
}

// capBatch applies a batch cap (Options.MaxBatch) the way PlanFunction
// would choose under it: scheduler.ChooseSlice (the same queueing rule) with
// ChooseOptions.MaxBatch, and the autoscaler's menu without larger
// batches. An explicit SM % is already planned at batch 1.
func capBatch(plan scheduler.Plan, slo time.Duration, explicitSM bool, maxBatch int) (scheduler.Plan, error) {
	if maxBatch <= 0 || plan.Profile == nil || explicitSM {
		return plan, nil
	}
	c, base, configs, err := scheduler.PlanSlices(plan.Profile, slo, scheduler.ChooseOptions{MaxBatch: maxBatch, Fallback: plan.Fallback})
	if err != nil {
		return plan, err
	}
	plan.Base, plan.Configs = base, configs
	plan.Request.SMPercent = c.SMPercent
	plan.Decision = c.Explanation
	return plan, nil
}

// apply carries out the core's effects on the engine, as a backend does.
// Replicas placed before the run (prewarmed) serve at once.
func (p *faasGPU) apply(e *Engine, res lifecycle.Result, prewarmed bool) {
	for _, ef := range res.Effects {
		f := p.byFn[ef.Function]
		switch ef.Kind {
		case lifecycle.Start:
			p.launch(e, f, ef.Replica, ef.Parked != "" && p.canTake(e, ef.Parked, ef.Replica), prewarmed)
			delete(p.sees, ef.Parked)
			if ef.Warm {
				// A standby: it starts out of service and, ready, stays
				// warm (idle tells the core).
				if r := p.byID[ef.Replica.ID]; r != nil {
					p.retire(e, f, r)
				}
			}
		case lifecycle.Demote:
			if strings.HasPrefix(ef.Why, "replaced by ") {
				p.replaced++
			}
			if r := p.byID[ef.Replica.ID]; r != nil {
				p.retire(e, f, r)
			}
		case lifecycle.Promote:
			if r := p.byID[ef.Replica.ID]; r != nil {
				p.promote(e, f, r)
			}
		case lifecycle.Stop:
			if r := p.byID[ef.Replica.ID]; r != nil {
				p.stop(e, f, r)
			}
		case lifecycle.Park:
			// Only its start is simulated: a parked process holds no GPU.
			e.after(e.opts.ContainerStart, event{kind: evParked, rep: &replica{id: ef.Replica.ID, fn: f.idx}})
			p.parked++
			if e.opts.ParkedHeldGPUs {
				p.sees[ef.Replica.ID] = heldOn(e, ef.Replica.Placement.Node)
			}
		case lifecycle.Unpark:
			// Nothing to end: the core forgets it, and ignores its start.
			delete(p.sees, ef.Replica.ID)
		case lifecycle.LoadModel:
			if r := p.byID[ef.Replica.ID]; r != nil && r.state == repServing {
				e.loadModel(r, ef.Model)
			}
		}
	}
}

// heldOn are the GPUs of node that hold a booking now: what a parked pod
// created there now sees (Options.ParkedHeldGPUs).
func heldOn(e *Engine, node string) []string {
	held := []string{}
	for _, g := range e.gpus {
		if g.dev.Node == node && g.booked > 0 {
			held = append(held, g.dev.UUID)
		}
	}
	return held
}

// sight is what parked process id can be handed, as its backend reports
// it to the core.
func (p *faasGPU) sight(e *Engine, id string) lifecycle.Sight {
	if !e.opts.ParkedHeldGPUs {
		return lifecycle.Sight{All: true}
	}
	return lifecycle.Sight{GPUs: p.sees[id]}
}

// canTake says whether parked process id can become replica v, as the
// Kubernetes backend checks it (canHandOver) before its hand-over: the
// core hands a process only a GPU in its sight, so a refusal counts
// (blind) for tests.
func (p *faasGPU) canTake(e *Engine, id string, v lifecycle.ReplicaView) bool {
	if !e.opts.ParkedHeldGPUs {
		return true
	}
	for _, u := range v.Placement.GPUs {
		if !slices.Contains(p.sees[id], u) {
			p.blind++
			return false
		}
	}
	return true
}

// launch starts a replica the core placed.
func (p *faasGPU) launch(e *Engine, f *fgFn, v lifecycle.ReplicaView, fromParked, prewarmed bool) {
	model := f.model
	if f.multi {
		model = -1 // loads what its requests name
	}
	e.repSeq-- // the core numbered it already
	r := e.newReplica(f.idx, model)
	r.id = v.ID
	r.cfg = v.Config
	r.batch = e.batchCap(max(v.Config.Batch, 1))
	r.sm, r.mem = v.Placement.Slice.SMPercent, v.Placement.Slice.MemoryBytes
	r.share = r.sm * 100
	r.fromParked = fromParked
	if fromParked {
		p.taken++
	}
	p.byID[r.id] = r
	f.live = append(f.live, r)
	p.placed++
	e.launch(r, e.byUUID[v.Placement.GPUs[0]], p.modelCapacity(e, f, r.mem), prewarmed, true)
	if r.state == repServing {
		p.apply(e, p.core.ReplicaReady(r.id, e.clock()), false)
	}
}

// modelCapacity is what a replica's memory holds of models once its CUDA
// context is paid (local.modelCapacity).
func (p *faasGPU) modelCapacity(e *Engine, f *fgFn, mem int64) int64 {
	m := e.models[f.model]
	return max(mem-(m.memory-m.size), 0)
}

// stop ends a replica the core let go (a warm one expired, evicted or
// yielding to consolidation). One that still holds requests drains first,
// as a stopped process or pod finishes what it was sent: out of routing,
// its model still in its memory for them (the core's allocator has
// already released its booking, and with it the cache's record, which the
// drain puts back until it goes).
func (p *faasGPU) stop(e *Engine, f *fgFn, r *replica) {
	f.live = slices.DeleteFunc(f.live, func(x *replica) bool { return x == r })
	f.warm = slices.DeleteFunc(f.warm, func(x *replica) bool { return x == r })
	delete(p.byID, r.id)
	if r.started && r.gpu != nil && (r.busy || r.queue.len() > 0) {
		e.retire(r)
		r.stopping = true
		e.cache.AddReplica(r.id, r.gpu.dev.UUID, r.gpu.dev.Node, p.modelCapacity(e, f, r.mem))
		if !f.multi {
			m := e.models[f.model]
			e.cache.Preload(r.id, m.name, m.size, e.clock())
		}
		return
	}
	e.release(r)
}

func (p *faasGPU) arrive(e *Engine, n int32) {
	f := p.fns[e.wl.Arrivals[n].Fn]
	f.requests++
	f.lastRequest = e.clock()
	if p.core.Live(f.key) == 0 { // scaled to zero: the gateway asks for one
		res, _, err := p.core.Scale(f.spec.Namespace(), f.spec.Name(), 1, e.clock())
		if err != nil {
			panic(fmt.Sprintf("sim: scale %s from zero: %v", f.key, err))
		}
		p.apply(e, res, false)
	}
	if f.multi {
		f.d.enqueue(e, n)
		if f.models == nil {
			f.models = map[string]uint64{}
		}
		f.models[f.d.modelOf(e, n)]++
		p.pullMulti(e, f)
		return
	}
	f.waiting.push(n)
	p.pull(e, f)
}

// pull hands f's waiting requests to the serving replicas that can start
// them (scheduler.Pull, the provider's proxy's decision), then starts a
// batch on each idle replica that was handed some. Requests that can no
// longer meet the SLO go after those that still can (scheduler.LateAfter).
func (p *faasGPU) pull(e *Engine, f *fgFn) {
	queued := f.waiting.len() + f.late.len()
	if queued == 0 {
		return
	}
	p.serving, p.slots = p.serving[:0], p.slots[:0]
	room := 0 // the most Pull can hand out: the queue's head is enough
	for _, r := range f.live {
		if r.state != repServing {
			continue
		}
		s := scheduler.Slot{InFlight: int(r.outstanding()), Batch: r.batch, Throughput: r.cfg.Throughput}
		if s.Throughput > 0 {
			room += max(s.Batch-s.InFlight, 0)
		} else {
			room = queued // never held back
		}
		p.serving = append(p.serving, r)
		p.slots = append(p.slots, s)
	}
	if after, ok := scheduler.LateAfter(e.wl.Functions[f.idx].SLO, p.slots); ok && !e.opts.ArrivalOrder {
		for f.waiting.len() > 0 && e.now-e.wl.Arrivals[f.waiting.peek()].At > after {
			f.late.push(f.waiting.pop())
		}
	}
	k := min(room, queued)
	if k == 0 {
		return
	}
	for len(p.head) < k {
		p.head = append(p.head, scheduler.Waiting{})
	}
	// One model per function: no locality rule, so the requests are
	// alike and Pull grants them oldest first.
	p.grants = scheduler.Pull(p.head[:k], p.slots, scheduler.PullView{}, p.grants[:0])
	for _, g := range p.grants {
		if f.waiting.len() > 0 {
			p.serving[g.Slot].queue.push(f.waiting.pop())
		} else {
			p.serving[g.Slot].queue.push(f.late.pop())
		}
	}
	for _, r := range p.serving {
		e.serveQueue(r)
	}
}

// pullLookahead is how far into a multi-model function's queue Pull
// looks beyond 8 requests per free place: far enough for a replica that
// can start to find a request whose model it holds (out of order) or for
// the locality bound to count the requests waiting for a model, bounded
// so that a queue of a million requests in an overload costs a pull what
// one of a few dozen does.
const pullLookahead = 64

// pullMulti hands a multi-model function's waiting requests to the
// serving replicas that can start them, by scheduler.Pull with the
// locality rules (the provider's X-Model dispatch): a replica holding the
// model first, the locality bound before a load elsewhere, out of order.
// A replica takes up to its batch size, of any models; it batches those of
// one model together (Engine.serveQueue). Requests that can no longer meet
// the SLO are offered after those that still can (scheduler.LateAfter,
// LateLast), as in pull.
func (p *faasGPU) pullMulti(e *Engine, f *fgFn) {
	q := f.d.queued()
	if q == 0 {
		return
	}
	p.serving, p.slots = p.serving[:0], p.slots[:0]
	room := 0
	for _, r := range f.live {
		if r.state != repServing {
			continue
		}
		s := scheduler.Slot{InFlight: int(r.outstanding()), Batch: r.batch, Throughput: r.cfg.Throughput, Models: e.cache.ModelCount(r.id)}
		if s.Throughput > 0 {
			room += max(s.Batch-s.InFlight, 0)
		} else {
			room = q
		}
		p.serving = append(p.serving, r)
		p.slots = append(p.slots, s)
	}
	if room == 0 {
		return
	}
	all, lookahead := f.d.queue(), pullLookahead+8*room
	late := 0 // as in the proxy: none where LateAfter tells none apart
	if after, ok := scheduler.LateAfter(e.wl.Functions[f.idx].SLO, p.slots); ok && !e.opts.ArrivalOrder {
		// Late for good, as in the proxy: each request is looked at once.
		for f.d.late < q && e.now-e.wl.Arrivals[all[f.d.late].Seq].At > after {
			f.d.late++
		}
		late = f.d.late
	}
	head := all[:min(q, lookahead)]
	if late > 0 {
		p.head, p.order = scheduler.LateLast(all[:min(q, late+lookahead)], late, lookahead, p.head, p.order)
		head = p.head
	}
	view := scheduler.PullView{
		Holds:       func(i int, m string) bool { return e.cache.Holds(p.serving[i].id, m) },
		Bound:       f.d.bound,
		OutOfOrder:  true,
		LoadSeconds: e.loadSeconds,
		SLO:         e.planSLO(e.wl.Functions[f.idx].SLO).Seconds(),
	}
	p.grants = scheduler.Pull(head, p.slots, view, p.grants[:0])
	if len(p.grants) == 0 {
		return
	}
	if late > 0 {
		for i := range p.grants {
			p.grants[i].Request = p.order[p.grants[i].Request]
		}
	}
	// Out of the queue from the back, so that the indices ahead hold;
	// onto the replicas oldest first.
	slices.SortFunc(p.grants, func(a, b scheduler.Grant) int { return a.Request - b.Request })
	p.seqs = slices.Grow(p.seqs[:0], len(p.grants))[:len(p.grants)]
	for i := len(p.grants) - 1; i >= 0; i-- {
		p.seqs[i] = f.d.removeAt(p.grants[i].Request)
	}
	for i, g := range p.grants {
		p.serving[g.Slot].queue.push(p.seqs[i])
	}
	for _, r := range p.serving {
		e.serveQueue(r)
	}
}

func (p *faasGPU) parkedReady(e *Engine, id string) {
	p.apply(e, p.core.ParkedReady(id, p.sight(e, id), e.clock()), false)
}

func (p *faasGPU) ready(e *Engine, r *replica) {
	// A replacement ready retires what it replaces (a Demote or Stop);
	// those leave routing before the waiting requests are routed.
	p.apply(e, p.core.ReplicaReady(r.id, e.clock()), false)
	f := p.fns[r.fn]
	if f.multi {
		p.pullMulti(e, f)
	} else {
		p.pull(e, f) // it takes from the queue that built while it started
	}
	e.serveQueue(r)
}

func (p *faasGPU) idle(e *Engine, r *replica) {
	f := p.fns[r.fn]
	switch r.state {
	case repGone, repWarm:
	case repRetired:
		switch {
		case r.queue.len() > 0:
			e.serveQueue(r) // out of routing, it finishes what it was sent
		case r.stopping:
			e.release(r)
		default:
			r.state = repWarm
			// A standby that has just started is ready for the core; any
			// other replica it has as warm already.
			p.apply(e, p.core.ReplicaReady(r.id, e.clock()), false)
		}
	default:
		// Room at r: it pulls, and starts its next batch with what it
		// was handed while it ran and what it pulls now.
		if f.multi {
			p.pullMulti(e, f)
		} else {
			p.pull(e, f)
		}
		e.serveQueue(r)
	}
}

// tick is the engine's periodic event: the core's Tick when one is due,
// else its Rise pass.
func (p *faasGPU) tick(e *Engine) {
	if p.passes.TickDue(e.clock()) {
		p.pass(e, p.core.Tick)
	} else {
		p.pass(e, p.core.Rise)
	}
}

// pass feeds the core what the proxy would have counted of each function,
// then runs one of its periodic passes (Tick or Rise) and carries out its
// effects.
func (p *faasGPU) pass(e *Engine, run func(time.Time) lifecycle.Result) {
	for _, f := range p.fns {
		if f == nil {
			continue
		}
		l := lifecycle.Load{Requests: f.requests, LastRequest: f.lastRequest}
		if !e.opts.NoBacklog {
			l.Backlog = f.backlog()
		}
		if f.idx < len(e.sloServed) {
			l.SLOServed, l.SLOMissed = e.sloServed[f.idx], e.sloMissed[f.idx]
		}
		if f.multi {
			// What the proxy counts of a multi-model function: its
			// requests by model and its replicas' loads.
			l.Models = f.models
			if f.idx < len(e.loadsByFn) {
				l.Loads = e.loadsByFn[f.idx]
			}
		}
		p.core.ObserveLoad(f.key, l)
	}
	p.apply(e, run(e.clock()), false)
}

// backlog is what waits for f beyond what its replicas serve at once, as
// the local backend measures it (local.backlogLocked): requests
// outstanding at a replica above its batch size, plus those queued for a
// replica (in the function's queue, or the multi-model dispatcher's).
func (f *fgFn) backlog() float64 {
	n := f.waiting.len() + f.late.len() + f.d.queued()
	for _, r := range f.live {
		n += max(int(r.outstanding())-r.batch, 0)
	}
	return float64(n)
}

// retire scales r down to a warm replica.
func (p *faasGPU) retire(e *Engine, f *fgFn, r *replica) {
	f.live = slices.DeleteFunc(f.live, func(x *replica) bool { return x == r })
	e.retire(r)
	f.warm = append(f.warm, r)
	if r.started && !r.busy && r.queue.len() == 0 {
		r.state = repWarm
	}
}

// promote brings back a warm replica the core promoted.
func (p *faasGPU) promote(e *Engine, f *fgFn, r *replica) {
	f.warm = slices.DeleteFunc(f.warm, func(x *replica) bool { return x == r })
	f.live = append(f.live, r)
	p.promoted++
	if !r.started {
		r.state = repStarting // its pending ready event puts it in service
		return
	}
	r.state = repServing
	e.activate(r, true)
	p.ready(e, r)
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
