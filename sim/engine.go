package sim

import (
	"fmt"
	"io"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Options tune a run. The zero value of a field takes the default its
// comment gives.
type Options struct {
	// ContainerStart is how long a placed replica takes before its model
	// starts loading (scheduling, container start, runtime imports): 2 s.
	// With the profiles' load times (1-2.6 s for most models) a cold
	// replica is ready 3-5 s after placement, where FaST-GShare's and
	// HAS-GPU's readiness probes begin (research notes §5.4).
	ContainerStart time.Duration
	// Parked is the com.openfaas.gpu.parked annotation every function
	// has, read as the provider reads it (scheduler.ParseScalePolicy): ""
	// for none, which is auto, as for a function that does not say;
	// "auto"; or a count, "0" for none (lifecycle/parked.go). A replica
	// that takes a parked process starts in ParkedStart instead of
	// ContainerStart, then loads its model.
	Parked string
	// ParkedHeldGPUs parks as the Kubernetes backend's parked pods do
	// (serve -k8s-parked): a parked process sees the GPUs of its node that
	// held a booking when it was parked, and a replica placed on another
	// GPU does not take it: it starts as if none was parked
	// (docs/kubernetes.md, "Parked pods"). false: as local mode, any GPU
	// of the node.
	ParkedHeldGPUs bool
	// ParkedStart is how long a replica that took a parked process takes
	// before its model starts loading (its GPU settings handed over, its
	// CUDA context made): 1 s.
	ParkedStart time.Duration
	// NodeLoadFactor is the share of a cold load that a load the node did
	// recently costs: 0.4, the local backend's emulated replicas' value
	// (docs/scheduling.md §3).
	NodeLoadFactor float64
	// Drain is how long after the offered load requests may still finish;
	// the rest count as unfinished (and as SLO violations): 5 min.
	Drain time.Duration
	// SampleEvery spaces the time series: the duration / 400, at least 1 s.
	SampleEvery time.Duration
	// MaxBatch caps every replica's batch (0: no cap; only faas-gpu batches).
	MaxBatch int
	// LocalityBound is the provider's -locality-bound: 2.
	LocalityBound int
	// WarmTTL is the provider's -warm-ttl: 10 min.
	WarmTTL time.Duration
	// Tick is the provider's -autoscale-interval: 1 s.
	Tick time.Duration
	// Rise is the provider's -rise-interval: faas-gpu's core runs its
	// Rise pass this often between ticks (lifecycle.Core.Rise). 0: the
	// provider's default, 250 ms; at or above Tick: none.
	Rise time.Duration
	// FastTick is FaST-GShare's autoscaling period: 10 s (anchors §1.5).
	FastTick time.Duration
	// Autoscale tunes faas-gpu's autoscaler: the provider's defaults.
	Autoscale scheduler.AutoscaleOptions
	// SLOMargin makes the SLO-aware policies (faas-gpu, fast-gshare) plan
	// as if the SLO were SLO x SLOMargin, while violations are still
	// counted against the SLO: what a user gets by annotating a looser or
	// tighter SLO than the one they need. 0 or 1: the SLO as annotated, as
	// both systems ship; at most 2 (the ablation of the cost run's row
	// "before SLO/2", when faas-gpu held batches to half the SLO it was
	// given; it now plans with the queueing model at the SLO it is given).
	SLOMargin float64
	// FastScaleUp is the share of its pods' profiled throughput a
	// FaST-GShare function may use before it scales up: 1 (scale up on any
	// gap) unless set. HAS-GPU, the same group's successor, scales up at
	// 0.9 (ScaleUpThreshold, research notes §1.9): the most generous
	// reading of FaST-GShare's sources, an ablation.
	FastScaleUp float64
	// NoBacklog keeps the backlog from faas-gpu's autoscaler, which then
	// follows the rate alone (an ablation: the provider before it measured
	// its queues).
	NoBacklog bool
	// NoConsolidate keeps faas-gpu from moving replicas to free a GPU
	// (an ablation: the provider before consolidation).
	NoConsolidate bool
	// ArrivalOrder serves faas-gpu's queues first come, first served, late
	// requests (scheduler.LateAfter) in their place: the order the
	// scheduler's queueing models assume, which the calibration runs
	// check them against (an ablation: the provider before late requests
	// went last).
	ArrivalOrder bool
	// NoStandby keeps faas-gpu from keeping standby replicas (an
	// ablation: the provider before them, and its Kubernetes backend).
	NoStandby bool
	// NoWarm stops faas-gpu's replicas as they scale down instead of
	// keeping them warm, as the Kubernetes backend does until it can keep
	// a pod out of routing. For scripted runs (Script): a replica stopped
	// while it serves drops what it holds.
	NoWarm bool
	// Warmup excludes requests arriving before it from the request
	// measurements (latency, SLO, throughput, cache): caches fill and
	// autoscalers settle first. GPU accounting covers the whole run.
	Warmup time.Duration
	// Contention slows replicas busy at the same time on one GPU or node
	// (see Contention; nil: none, every batch takes its profiled latency,
	// and time sharing is k busy pods at 1/k speed).
	Contention *Contention
	// Progress receives a line about every two wall seconds (nil: none).
	Progress io.Writer
}

func (o Options) withDefaults(d time.Duration) Options {
	if o.ContainerStart <= 0 {
		o.ContainerStart = 2 * time.Second
	}
	if o.ParkedStart <= 0 {
		o.ParkedStart = time.Second
	}
	if o.NodeLoadFactor <= 0 {
		o.NodeLoadFactor = 0.4
	}
	if o.Drain <= 0 {
		o.Drain = 5 * time.Minute
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = max(time.Second, (d / 400).Truncate(time.Second))
	}
	if o.LocalityBound <= 0 {
		o.LocalityBound = 2
	}
	if o.WarmTTL <= 0 {
		o.WarmTTL = 10 * time.Minute
	}
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.Rise <= 0 {
		o.Rise = lifecycle.DefaultRise
	}
	if o.FastTick <= 0 {
		o.FastTick = 10 * time.Second
	}
	if o.FastScaleUp <= 0 || o.FastScaleUp > 1 {
		o.FastScaleUp = 1
	}
	if o.SLOMargin <= 0 || o.SLOMargin > 2 {
		o.SLOMargin = 1
	}
	if o.Autoscale == (scheduler.AutoscaleOptions{}) {
		o.Autoscale = scheduler.DefaultAutoscaleOptions
	}
	return o
}

// epoch is virtual time 0 as the scheduler and cache see it.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// policy is one scheduler under test: it deploys the functions, routes
// requests, reacts to replicas freeing up and scales on its ticks. The
// engine does the rest: time, service, model loads, accounting.
type policy interface {
	// start deploys the workload's functions before time 0.
	start(e *Engine) error
	// arrive routes request n.
	arrive(e *Engine, n int32)
	// ready: replica r has started and can serve.
	ready(e *Engine, r *replica)
	// idle: replica r finished a batch.
	idle(e *Engine, r *replica)
	// tick runs the policy's periodic decisions (every e.tickEvery).
	tick(e *Engine)
	// compute is how long r computes a batch of k requests for model m,
	// its model already in memory.
	compute(e *Engine, r *replica, m int, k int) time.Duration
}

// parker is a policy that keeps processes parked (Options.Parked).
type parker interface {
	// parkedReady: parked process id has started.
	parkedReady(e *Engine, id string)
}

// Engine runs one policy over one workload on one cluster in virtual time.
type Engine struct {
	opts Options
	// loadsByFn counts the model loads (misses and node hits) of each
	// function's replicas, by workload index.
	loadsByFn []uint64
	// sloServed and sloMissed count each function's completed requests
	// with an SLO, and those over it, from the start (the warm-up too):
	// what the proxy's SLO metrics count, for faas-gpu's feedback.
	sloServed, sloMissed []uint64

	wl      *Workload
	inv     gpu.Inventory
	product string
	name    string
	// models are the workload's models by index, then function models no
	// request names; fnModel maps a function to its model there.
	models  []modelInfo
	fnModel []int
	// modelIndex finds a model in models by name.
	modelIndex map[string]int

	now    time.Duration
	q      eventQueue
	gpus   []*gpuState
	byUUID map[string]*gpuState
	cache  *cache.Cache
	pol    policy
	met    collector

	next        int // the next arrival to schedule
	outstanding int // arrived, not completed
	repSeq      int
	tickEvery   time.Duration
	timeShared  bool // compute on a GPU is shared in time (time-sharing)
	// catalogQuotas: the profiles hold quotas below 100 (fast-gshare).
	catalogQuotas bool
	store         *profiles.Store
	scratch       []int32
	// onDone, when set (by tests), sees every completion: the request,
	// the replica that served it and when.
	onDone func(n int32, r *replica, at time.Duration)
}

func newEngine(name string, wl *Workload, inv gpu.Inventory, cat *Catalog, opts Options) (*Engine, error) {
	e := &Engine{
		opts: opts.withDefaults(wl.Duration), wl: wl, inv: inv, product: inv.MainProduct(), name: name,
		byUUID: map[string]*gpuState{}, cache: cache.New(cache.DefaultOptions), catalogQuotas: cat.Quotas, store: cat.Store,
	}
	index := map[string]int{}
	add := func(m string) (int, error) {
		if i, ok := index[m]; ok {
			return i, nil
		}
		info, err := cat.model(m, e.product)
		if err != nil {
			return 0, err
		}
		index[m] = len(e.models)
		e.models = append(e.models, info)
		return index[m], nil
	}
	for _, m := range wl.Models {
		if _, err := add(m); err != nil {
			return nil, err
		}
	}
	for _, f := range wl.Functions {
		i, err := add(f.Model)
		if err != nil {
			return nil, fmt.Errorf("function %s: %w", f.Name, err)
		}
		e.fnModel = append(e.fnModel, i)
	}
	e.modelIndex = index
	nodes := map[string]*nodeState{}
	for _, n := range inv.Nodes {
		nodes[n.Name] = &nodeState{cores: float64(n.Cores()), cpu: 1}
	}
	for i, d := range inv.Devices() {
		g := &gpuState{dev: d, idx: i, node: nodes[d.Node]}
		g.node.gpus = append(g.node.gpus, g)
		e.gpus = append(e.gpus, g)
		e.byUUID[d.UUID] = g
	}
	if c := e.opts.Contention; c != nil {
		for i := range e.models {
			e.models[i].penalty = c.Penalty(e.models[i].name)
		}
	}
	if len(e.gpus) == 0 {
		return nil, fmt.Errorf("cluster: no GPUs")
	}
	e.met.init(e)
	return e, nil
}

// clock is the virtual time as the scheduler and the cache read it.
func (e *Engine) clock() time.Time { return epoch.Add(e.now) }

func (e *Engine) after(d time.Duration, ev event) {
	ev.at = e.now + d
	e.q.push(ev)
}

// run plays the workload through. It stops when every request has
// completed, or Drain after the offered load ends.
func (e *Engine) run() error {
	if err := e.pol.start(e); err != nil {
		return fmt.Errorf("%s: %w", e.name, err)
	}
	if len(e.wl.Arrivals) > 0 {
		e.q.push(event{at: e.wl.Arrivals[0].At, kind: evArrival})
	}
	if e.tickEvery > 0 {
		e.after(e.tickEvery, event{kind: evTick})
	}
	e.q.push(event{at: 0, kind: evSample})
	stop := e.wl.Duration + e.opts.Drain
	prog := newProgress(e.opts.Progress, e.name, e.wl)
	end := e.wl.Duration
	for e.q.Len() > 0 {
		ev := e.q.pop()
		if ev.at > stop {
			end = stop // out of time: what is left is unfinished
			break
		}
		e.met.advance(ev.at)
		e.now = ev.at
		e.handle(ev)
		if e.next == len(e.wl.Arrivals) && e.outstanding == 0 && e.now >= e.wl.Duration {
			break
		}
		prog.tick(e)
	}
	e.now = max(e.now, end)
	e.met.advance(e.now)
	e.met.sample(e)
	prog.done(e)
	return nil
}

func (e *Engine) handle(ev event) {
	switch ev.kind {
	case evArrival:
		n := int32(e.next)
		e.next++
		if e.next < len(e.wl.Arrivals) {
			e.q.push(event{at: e.wl.Arrivals[e.next].At, kind: evArrival})
		}
		e.outstanding++
		a := e.wl.Arrivals[n]
		e.met.arrived(a.At, a.At >= e.opts.Warmup && e.wl.Functions[a.Fn].SLO > 0)
		e.pol.arrive(e, n)
	case evDone:
		if ev.gen == ev.rep.gen {
			e.finish(ev.rep)
		}
	case evLoaded:
		if ev.gen == ev.rep.gen {
			e.startCompute(ev.rep, ev.rep.compute)
		}
	case evReady:
		r := ev.rep
		switch r.state {
		case repStarting:
			r.started = true
			r.state = repServing
			e.activate(r, true)
			e.pol.ready(e, r)
		case repRetired: // scaled down while it started
			r.started = true
			e.pol.idle(e, r)
		}
	case evShare:
		e.shareStep(ev.gpu, ev.gen)
	case evContend:
		e.contendDone(ev.rep, ev.gen)
	case evModelLoaded:
		r := ev.rep
		if r.state == repServing || r.state == repRetired {
			m := e.models[ev.n]
			e.cache.Fill(r.id, m.name, m.size, e.clock())
			if r.state == repServing {
				e.pol.idle(e, r) // it may now take what waits for the model
			}
		}
	case evParked:
		if p, ok := e.pol.(parker); ok {
			p.parkedReady(e, ev.rep.id)
		}
	case evTick:
		e.pol.tick(e)
		e.after(e.tickEvery, event{kind: evTick})
	case evSample:
		e.met.sample(e)
		e.after(e.opts.SampleEvery, event{kind: evSample})
	}
}

// newReplica makes a replica of function fn (-1 for a worker), not yet
// placed. IDs are numbered so that their order is the creation order.
func (e *Engine) newReplica(fn, model int) *replica {
	e.repSeq++
	prefix := "worker"
	if fn >= 0 {
		prefix = e.wl.Functions[fn].Name
	}
	return &replica{id: fmt.Sprintf("%s-%07d", prefix, e.repSeq), seq: e.repSeq, fn: fn, model: model, batch: 1, quota: 100}
}

// launch starts replica r on g. The cache learns of it (unless the
// faas-gpu allocator booked it, which tells the cache itself) with room
// for capacity bytes of models. A prewarmed replica was deployed before
// the run: it is serving at once, its model loaded. Otherwise it starts
// its container and loads its model (cheaper if the node did recently).
func (e *Engine) launch(r *replica, g *gpuState, capacity int64, prewarmed, booked bool) {
	r.gpu = g
	e.book(g, 1)
	if booked {
		e.cache.SetCapacity(r.id, capacity)
	} else {
		e.cache.AddReplica(r.id, g.dev.UUID, g.dev.Node, capacity)
	}
	delay := e.opts.ContainerStart
	if r.fromParked {
		delay = e.opts.ParkedStart
	}
	if r.model >= 0 {
		m := e.models[r.model]
		o := e.cache.Preload(r.id, m.name, m.size, e.clock())
		if !prewarmed {
			delay += e.loadTime(m, o)
			if e.now >= e.opts.Warmup {
				e.met.load(o)
			}
		}
	}
	if prewarmed {
		r.started = true
		r.state = repServing
		e.activate(r, true)
		return
	}
	r.state = repStarting
	e.after(delay, event{kind: evReady, rep: r})
}

// retire takes r out of service; it finishes what it holds.
func (e *Engine) retire(r *replica) {
	if r.state == repServing {
		e.activate(r, false)
	}
	if r.state == repServing || r.state == repStarting {
		r.state = repRetired
	}
}

// release stops r and frees what it holds on its GPU; its models move to
// the node tier of the cache.
func (e *Engine) release(r *replica) {
	if r.state == repGone || r.gpu == nil {
		r.state = repGone
		return
	}
	if r.state == repServing {
		e.activate(r, false)
	}
	e.book(r.gpu, -1)
	e.cache.RemoveReplica(r.id, e.clock())
	r.state = repGone
}

// loadModel starts replica r loading the named model in the background
// (lifecycle.LoadModel): it serves meanwhile, and holds the model once the
// load, from the node tier where the node had it, is done. A model the
// workload does not know is not loaded.
func (e *Engine) loadModel(r *replica, name string) {
	i, ok := e.modelIndex[name]
	if !ok || r.gpu == nil || e.cache.Holds(r.id, name) {
		return
	}
	m := e.models[i]
	o := cache.Miss
	if e.cache.OnNode(r.gpu.dev.Node, name, e.clock()) {
		o = cache.NodeHit
	}
	e.after(e.loadTime(m, o), event{kind: evModelLoaded, rep: r, n: int32(i)})
}

// loadSeconds is a model's profiled load time, as the provider's proxy
// knows it (scheduler.PullView.LoadSeconds); 0 for one it does not know.
func (e *Engine) loadSeconds(name string) float64 {
	if i, ok := e.modelIndex[name]; ok {
		return e.models[i].load.Seconds()
	}
	return 0
}

func (e *Engine) loadTime(m modelInfo, o cache.Outcome) time.Duration {
	switch o {
	case cache.Hit:
		return 0
	case cache.NodeHit:
		return time.Duration(float64(m.load) * e.opts.NodeLoadFactor)
	}
	return m.load
}

// serve starts a batch of requests (all for one model) on idle replica r:
// the model loads if r does not hold it, then the batch computes.
func (e *Engine) serve(r *replica, reqs []int32) {
	m := int(e.wl.Arrivals[reqs[0]].Model)
	info := e.models[m]
	o, _ := e.cache.Use(r.id, info.name, info.size, e.clock())
	if o != cache.Hit && r.fn >= 0 {
		// By function, warm-up included: what a proxy counts of a
		// function's loads (X-Faas-Gpu-Cache) for its autoscaler.
		for len(e.loadsByFn) <= int(r.fn) {
			e.loadsByFn = append(e.loadsByFn, 0)
		}
		e.loadsByFn[r.fn]++
	}
	if e.wl.Arrivals[reqs[0]].At >= e.opts.Warmup {
		e.met.served(o, len(reqs))
		if o != cache.Hit {
			e.met.load(o)
		}
	}
	r.running = append(r.running[:0], reqs...)
	r.busy = true
	r.batchModel = m
	r.gen++
	compute := e.pol.compute(e, r, m, len(reqs))
	if load := e.loadTime(info, o); load > 0 {
		r.compute = compute
		e.after(load, event{kind: evLoaded, rep: r, gen: r.gen})
		return
	}
	e.startCompute(r, compute)
}

func (e *Engine) startCompute(r *replica, d time.Duration) {
	e.setBusy(r.gpu, 1)
	if e.opts.Contention != nil {
		e.contendAdd(r, d)
		return
	}
	if e.timeShared {
		e.shareAdd(r, d)
		return
	}
	e.after(d, event{kind: evDone, rep: r, gen: r.gen})
}

// finish completes r's batch and hands r back to the policy.
func (e *Engine) finish(r *replica) {
	e.setBusy(r.gpu, -1)
	inWindow := e.now >= e.opts.Warmup && e.now <= e.wl.Duration
	for _, n := range r.running {
		a := e.wl.Arrivals[n]
		if a.At >= e.opts.Warmup {
			e.met.complete(int(a.Fn), a.At, e.now-a.At, e.wl.Functions[a.Fn].SLO)
		}
		if slo := e.wl.Functions[a.Fn].SLO; slo > 0 {
			e.countSLO(int(a.Fn), e.now-a.At > slo)
		}
		if inWindow {
			e.met.inWindow++
		}
		e.met.sinceDone++
		e.outstanding--
		if e.onDone != nil {
			e.onDone(n, r, e.now)
		}
	}
	r.running = r.running[:0]
	r.busy = false
	r.gen++
	e.pol.idle(e, r)
}

// countSLO counts a completed request of function fn with an SLO.
func (e *Engine) countSLO(fn int, missed bool) {
	for len(e.sloServed) <= fn {
		e.sloServed, e.sloMissed = append(e.sloServed, 0), append(e.sloMissed, 0)
	}
	e.sloServed[fn]++
	if missed {
		e.sloMissed[fn]++
	}
}

// book counts a replica holding (+1) or freeing (-1) g's memory.
func (e *Engine) book(g *gpuState, d int) {
	if g.booked == 0 && d > 0 {
		e.met.used++
	}
	g.booked += d
	if g.booked == 0 {
		e.met.used--
	}
}

// activate puts r's share of its GPU in (on) or out of service.
func (e *Engine) activate(r *replica, on bool) {
	g := r.gpu
	before := min(g.alloc, fullShare)
	if on {
		if g.active == 0 {
			e.met.active++
		}
		g.active++
		g.alloc += r.share
	} else {
		g.active--
		if g.active == 0 {
			e.met.active--
		}
		g.alloc -= r.share
	}
	e.met.alloc += min(g.alloc, fullShare) - before
}

func (e *Engine) setBusy(g *gpuState, d int) {
	if g.busy == 0 && d > 0 {
		e.met.busy++
	}
	g.busy += d
	if g.busy == 0 {
		e.met.busy--
	}
}

// serveQueue starts the next batch from r's own queue, if any.
func (e *Engine) serveQueue(r *replica) {
	if r.busy || r.queue.len() == 0 {
		return
	}
	// A batch is of one model (serve): the oldest request's, with the
	// others of its model; what a multi-model replica was handed of
	// other models runs in its next batches.
	e.scratch = r.queue.takeModel(e.scratch[:0], max(r.batch, 1), e.modelOf)
	e.serve(r, e.scratch)
}

// planSLO is the SLO a policy plans with (see Options.SLOMargin).
// modelOf is the model request n names.
func (e *Engine) modelOf(n int32) int32 { return e.wl.Arrivals[n].Model }

func (e *Engine) planSLO(slo time.Duration) time.Duration {
	return time.Duration(float64(slo) * e.opts.SLOMargin)
}

func (e *Engine) batchCap(b int) int {
	if e.opts.MaxBatch > 0 {
		return min(b, e.opts.MaxBatch)
	}
	return b
}
