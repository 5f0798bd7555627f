package local

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
)

// LabelEmulated marks, in a function's status, a function whose replicas
// are emulated GPU workers rather than real processes.
const LabelEmulated = "com.openfaas.gpu.emulated"

// DefaultNamespace always exists.
const DefaultNamespace = "openfaas-fn"

// Config configures the local backend.
type Config struct {
	StateDir  string
	Inventory gpu.Inventory
	// MPSPipeDir is given to replicas as CUDA_MPS_PIPE_DIRECTORY.
	MPSPipeDir string
	// Emulation is how replicas of image-only functions behave when no
	// profile describes their model.
	Emulation Emulation
	// Profiles give slices, latencies and load times; nil: none.
	Profiles *profiles.Store
	// Autoscale tunes the SLO autoscaler.
	Autoscale scheduler.AutoscaleOptions
	// Tick is the autoscaler's period; 0 runs no loop (tests call Tick).
	Tick time.Duration
	// Rise is how often the loop runs the core's Rise pass between ticks,
	// for a rising rate (lifecycle.Core.Rise); 0, or at least Tick: never.
	Rise time.Duration
	// WarmTTL is how long an idle warm replica keeps its model before it
	// is stopped.
	WarmTTL time.Duration
	// NoConsolidate never moves a replica to free a GPU (serve
	// -consolidate=false).
	NoConsolidate bool
	// NoStandby keeps no standby replicas (serve -standby=false).
	NoStandby bool
	// NodeLoadFactor is the share of a cold load a load from the node tier
	// (host memory or local disk) takes.
	NodeLoadFactor float64
	// Load is what the proxy counts of each function, for the autoscaler;
	// nil: nothing is counted (a backend without a proxy).
	Load LoadSource
	// Templates runs functions from template build folders (template.go); nil: none.
	Templates *Templates
	Log       *zap.Logger
}

// Backend runs functions as local processes or emulated GPU workers. What
// happens to their replicas is decided by lifecycle.Core, the same code
// the Kubernetes backend and the simulator run; the backend carries out
// its effects (processes, records, logs) and tells it what it observes.
type Backend struct {
	cfg     Config
	log     *zap.Logger
	core    *lifecycle.Core
	cache   *cache.Cache
	state   *stateStore
	logs    *logHub
	stats   *scheduler.StatsRecorder
	product string // the GPU product profiles are chosen for
	done    chan struct{}
	// closing is cancelled by Close: the backend's loops end, and so does
	// the work a replica is asked beside its requests (model loads,
	// modelload.go).
	closing       context.Context
	cancelClosing context.CancelFunc
	// stopping counts the replica stops that run once the lock is let go
	// (update, delete, eviction, expiry), so that Close waits for every
	// process a replica started, and the model loads asked of replicas
	// (modelload.go), which Close ends. Add only under mu while not closed.
	stopping sync.WaitGroup
	// stopCtx is the context of those stops; Close cancels it when its own
	// context ends first, and each stop then kills its process group at once.
	stopCtx     context.Context
	cancelStops context.CancelFunc
	// quarantined counts the state records moved aside at start-up.
	quarantined atomic.Uint64

	mu sync.Mutex
	// running are the replicas started here, by ID, warm ones included.
	running map[string]*replica
	// saved is each function's record as last written or read at
	// start-up: a record equal to it is not written again.
	// A digest, not the bytes: at thousands of functions the records
	// themselves were the backend's largest memory.
	saved map[string][sha256.Size]byte
	// routes are what the proxy reads, one immutable route per function
	// (route.go); their own lock, never held for long.
	routesMu sync.RWMutex
	routes   map[string]*route
	// load is what the proxy counted (handlers.LoadBook).
	load LoadSource
	// pendingReason is the reason last logged for each pending replica,
	// so a replica that keeps waiting is logged once.
	pendingReason map[string]string
	// parked are the processes started ahead of placements, by ID
	// (parked.go); parkable says, by function, whether the backend can
	// park it (lifecycle.Options.CanPark).
	parked     map[string]*parkedRun
	parkable   map[string]bool
	namespaces map[string]types.FunctionNamespace
	closed     bool
}

// LoadSource is what the proxy counted of a function (handlers.LoadBook):
// every request so far, the last one's time, and how many wait in the
// proxy for a replica now.
type LoadSource interface {
	Load(namespace, name string) (requests uint64, last time.Time, queued int)
}

// ModelLoadSource is a LoadSource that also counts a function's requests
// by model (X-Model) and its replicas' model loads (handlers.LoadBook), so
// that a multi-model function's capacity is planned from its mix
// (lifecycle.Load.Models).
type ModelLoadSource interface {
	Models(namespace, name string) (byModel map[string]uint64, loads uint64)
}

// SLOLoadSource is a LoadSource that also counts a function's requests
// with an SLO that finished and those that missed it (handlers.LoadBook):
// the autoscaler corrects its model with them (lifecycle.Load.SLOServed).
type SLOLoadSource interface {
	SLO(namespace, name string) (served, missed uint64)
}

// replica is a replica this backend started: a process or an emulated
// worker.
type replica struct {
	id       string
	fn       string // function key
	config   scheduler.SliceConfig
	run      runner
	emulated bool
	inFlight atomic.Int64
	// readyAfter is how long the replica took from placement to ready, in
	// nanoseconds; 0 until it is ready. Set once, by the start-up watch.
	readyAfter atomic.Int64
	// modelLoads is how long the replica says each of its models took to
	// load (docs/replica-protocol.md, loadSeconds); nil until it says.
	modelLoads atomic.Pointer[map[string]float64]
	// dir is its process's work dir where it is not its own ID's (a
	// parked process taken over keeps the one it was started in).
	dir string
	// takesNoLoads is set once the replica answered a load as a server
	// that does not know it (modelload.ErrNotSpoken): it is not asked
	// again.
	takesNoLoads atomic.Bool
	// quiet is set once the replica is stopped: output that comes later
	// (a grandchild's, say) is dropped, so a deleted function's log ring
	// does not come back.
	quiet atomic.Bool
}

// errClosed answers changes asked of a closed backend: it would start
// replicas nothing stops.
var errClosed = errors.New("local backend is closed")

func key(ns, name string) string { return lifecycle.Key(ns, name) }

// New opens the state dir, restores every function with its placements and
// starts its replicas and, with a Tick, the autoscaler.
func New(cfg Config) (*Backend, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.MPSPipeDir == "" {
		cfg.MPSPipeDir = lifecycle.DefaultMPSPipeDir
	}
	if cfg.Profiles == nil {
		cfg.Profiles = profiles.NewStore()
	}
	if cfg.Autoscale == (scheduler.AutoscaleOptions{}) {
		cfg.Autoscale = scheduler.DefaultAutoscaleOptions
	}
	if cfg.WarmTTL <= 0 {
		cfg.WarmTTL = lifecycle.DefaultWarmTTL
	}
	if cfg.NodeLoadFactor <= 0 {
		cfg.NodeLoadFactor = defaultNodeLoadFactor
	}
	st, err := openState(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	c := cache.New(cache.DefaultOptions)
	stopCtx, cancelStops := context.WithCancel(context.Background())
	closing, cancelClosing := context.WithCancel(context.Background())
	b := &Backend{
		stopCtx: stopCtx, cancelStops: cancelStops, closing: closing, cancelClosing: cancelClosing, saved: map[string][sha256.Size]byte{},
		cfg: cfg, log: cfg.Log, cache: c, state: st, logs: newLogHub(2000), stats: scheduler.NewStatsRecorder(),
		product: cfg.Inventory.MainProduct(),
		running: map[string]*replica{}, pendingReason: map[string]string{}, routes: map[string]*route{}, load: cfg.Load,
		parked: map[string]*parkedRun{}, parkable: map[string]bool{},
		done: make(chan struct{}),
	}
	b.core = lifecycle.New(cfg.Inventory, c, lifecycle.Options{Profiles: cfg.Profiles, Autoscale: cfg.Autoscale, WarmTTL: cfg.WarmTTL,
		NoConsolidate: cfg.NoConsolidate, NoStandby: cfg.NoStandby, NewID: newReplicaID, CanPark: b.canPark})
	if err := b.restore(); err != nil {
		cancelStops()
		cancelClosing()
		st.close()
		return nil, err
	}
	if cfg.Tick > 0 {
		go b.loop(cfg.Tick, cfg.Rise)
	} else {
		close(b.done)
	}
	return b, nil
}

// QuarantinedRecords counts the state records that could not be read at
// start-up and were moved to the state dir's quarantine folder.
func (b *Backend) QuarantinedRecords() uint64 { return b.quarantined.Load() }

func (b *Backend) restore() error {
	nss, badNS, err := b.state.loadNamespaces()
	if err != nil {
		return err
	}
	b.namespaces = nss
	loaded, bad, err := b.state.loadFunctions()
	if err != nil {
		return err
	}
	if badNS != nil {
		bad = append(bad, *badNS)
	}
	for _, q := range bad {
		b.quarantined.Add(1)
		b.log.Error("state record unreadable: moved to quarantine, serving the rest",
			zap.String("record", q.path), zap.String("movedTo", q.to), zap.Error(q.err))
	}
	if badNS != nil {
		b.rebuildNamespaces(loaded)
	}
	if _, ok := b.namespaces[DefaultNamespace]; !ok {
		b.namespaces[DefaultNamespace] = types.FunctionNamespace{Name: DefaultNamespace, Labels: map[string]string{"openfaas": "1"}}
	}
	recs := make([]functionRecord, len(loaded))
	for i, l := range loaded {
		recs[i] = l.functionRecord
		b.saved[key(l.Function.Namespace(), l.Function.Name())] = sha256.Sum256(l.raw)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for _, rec := range recs {
		b.noteParkableLocked(rec.Function)
	}
	res, notes := b.core.Restore(recs, now)
	for _, n := range notes {
		if n.PlanErr != nil {
			b.log.Warn("function's profile changed; keeping its stored request", zap.String("function", n.Function), zap.Error(n.PlanErr))
		}
		for id, err := range n.Lost {
			b.log.Warn("placement not restored, replica pending", zap.String("replica", id), zap.Error(err))
		}
	}
	for _, rec := range recs {
		k := key(rec.Function.Namespace(), rec.Function.Name())
		b.publishRouteLocked(k)
		b.log.Info("function restored", zap.String("function", rec.Function.Name()), zap.String("namespace", rec.Function.Namespace()),
			zap.Int("replicas", rec.Replicas), zap.Int("placed", len(rec.Placed)))
	}
	// A record that cannot be written now is logged: the next change of
	// the function writes it again, and the replicas run as booked.
	_ = b.applyLocked(res, now)
	return nil
}

// rebuildNamespaces names again, after namespaces.json was unreadable, the
// namespaces that functions or secrets on disk are in; their labels and
// annotations are in the quarantined file.
func (b *Backend) rebuildNamespaces(recs []loadedRecord) {
	names := map[string]bool{}
	for _, rec := range recs {
		names[rec.Function.Namespace()] = true
	}
	secretNS, err := b.state.secretNamespaces()
	if err != nil {
		b.log.Error("namespaces of secrets not rebuilt", zap.Error(err))
	}
	for _, n := range secretNS {
		names[n] = true
	}
	for n := range names {
		b.namespaces[n] = types.FunctionNamespace{Name: n, Labels: map[string]string{"openfaas": "1"}}
	}
	if _, ok := b.namespaces[DefaultNamespace]; !ok {
		b.namespaces[DefaultNamespace] = types.FunctionNamespace{Name: DefaultNamespace, Labels: map[string]string{"openfaas": "1"}}
	}
	if err := b.state.saveNamespaces(b.namespaces); err != nil {
		b.log.Error("rebuilt namespaces not saved", zap.Error(err))
	}
}

// Close stops the autoscaler and every replica, and waits for them;
// functions stay in the state dir.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.cancelClosing()
	var jobs []stopJob
	for _, r := range b.running {
		jobs = append(jobs, stopJob{run: r.run, quiet: &r.quiet})
	}
	for _, pr := range b.parked {
		// Not restored: a restart parks afresh.
		jobs = append(jobs, stopJob{run: pr.run, dir: pr.dir})
	}
	b.mu.Unlock()
	<-b.done
	stopAll(ctx, jobs)
	b.waitStops(ctx)
	return b.state.close()
}

// waitStops waits for the replica stops still in flight. When ctx ends
// first they are told to kill at once, and waited for all the same: a
// provider that exits before its replicas' process groups are gone leaves
// their grandchildren running (Pdeathsig reaches only the child).
func (b *Backend) waitStops(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		b.stopping.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		b.cancelStops()
		<-done
	}
	b.cancelStops()
}

// stopJob is a replica to stop and clean up.
type stopJob struct {
	run   runner
	dir   string
	quiet *atomic.Bool // the replica's: set once it is stopped
	// inFlight counts the requests the proxy handed the replica (nil: it
	// never served). Its stop waits for them, as a pod's termination
	// waits for its watchdog to finish what it holds: the replica left
	// routing first, so a replica taken out of service (a move, a resize,
	// a scale-down) loses none of what it was sent.
	inFlight *atomic.Int64
}

// stopDrainGrace bounds how long a stop waits for a replica's requests in
// flight; a request that outlives it is cut, as a pod's is at its
// termination grace period.
const stopDrainGrace = 30 * time.Second

// drain waits until the replica holds no request, stopDrainGrace passes,
// or ctx ends (the provider shutting down).
func (j stopJob) drain(ctx context.Context) {
	if j.inFlight == nil || j.inFlight.Load() <= 0 {
		return
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	grace := time.NewTimer(stopDrainGrace)
	defer grace.Stop()
	for j.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return
		case <-grace.C:
			return
		case <-tick.C:
		}
	}
}

func stopAll(ctx context.Context, jobs []stopJob) {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.drain(ctx)
			if j.run != nil {
				_ = j.run.Stop(ctx)
			}
			if j.quiet != nil {
				j.quiet.Store(true)
			}
			if j.dir != "" {
				_ = os.RemoveAll(j.dir)
			}
		}()
	}
	wg.Wait()
}

// stopLaterLocked stops jobs once the lock is let go, tracked so Close
// waits for them.
func (b *Backend) stopLaterLocked(jobs []stopJob) {
	if len(jobs) == 0 {
		return
	}
	b.stopping.Add(1)
	go func() {
		defer b.stopping.Done()
		stopAll(b.stopCtx, jobs)
	}()
}

// Deploy creates a function with its initial replicas.
func (b *Backend) Deploy(ctx context.Context, spec scheduler.Function) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	if err := b.checkLocked(spec); err != nil {
		return err
	}
	return b.writeSpecLocked(spec, b.core.Deploy)
}

// Update replaces a function's spec and restarts its replicas on it, all
// stopped before the new ones are placed: a GPU has no room for a surge.
func (b *Backend) Update(ctx context.Context, spec scheduler.Function) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	if !b.core.Has(key(spec.Namespace(), spec.Name())) {
		return fmt.Errorf("function %s.%s: %w", spec.Name(), spec.Namespace(), fs.ErrNotExist)
	}
	if err := b.checkLocked(spec); err != nil {
		return err
	}
	return b.writeSpecLocked(spec, b.core.Update)
}

// writeSpecLocked carries out the core's decision on a new or changed
// spec. A spec the core refuses, or a record the store cannot write,
// leaves the function as it was, so the spec's parkable mark is taken
// back with it.
func (b *Backend) writeSpecLocked(spec scheduler.Function, decide func(scheduler.Function, time.Time) (lifecycle.Result, error)) error {
	now := time.Now()
	undoParkable := b.noteParkableLocked(spec)
	res, err := b.timed(func() (lifecycle.Result, error) { return decide(spec, now) })
	if err == nil {
		err = b.commitLocked(&res)
	}
	if err != nil {
		undoParkable()
		return err
	}
	k := key(spec.Namespace(), spec.Name())
	if v, ok := b.core.Function(k); ok {
		b.log.Info("slice chosen", zap.String("function", spec.Name()), zap.String("decision", v.Plan.Decision))
	}
	defer b.publishRouteLocked(k)
	return b.applyLocked(res, now)
}

// checkLocked rejects what the core cannot see: an unknown namespace or a
// missing secret.
func (b *Backend) checkLocked(spec scheduler.Function) error {
	ns := spec.Namespace()
	if _, ok := b.namespaces[ns]; !ok {
		return &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist", ns)}
	}
	for _, s := range spec.Deployment.Secrets {
		if !b.state.secretExists(ns, s) {
			return &gpu.FieldError{Field: "secrets", Reason: fmt.Sprintf("secret %q not found in namespace %s", s, ns)}
		}
	}
	return nil
}

// Delete removes a function and waits for its replicas to stop; its logs
// go only then, so what they print while stopping does not outlive it.
func (b *Backend) Delete(ctx context.Context, ns, name string) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	now := time.Now()
	res, err := b.timed(func() (lifecycle.Result, error) { return b.core.Delete(ns, name, now) })
	if err != nil {
		b.mu.Unlock()
		return err
	}
	if err := b.commitLocked(&res); err != nil {
		b.mu.Unlock()
		return err
	}
	delete(b.parkable, key(ns, name))
	stopped := b.takeStopsLocked(&res, now)
	err = b.applyLocked(res, now)
	b.publishRouteLocked(key(ns, name))
	b.mu.Unlock()
	stopAll(ctx, stopped)
	b.logs.Forget(ns, name)
	return err
}

// Scale sets the desired replica count, inside the function's bounds.
// Replicas taken away stay warm (model in memory, out of service) so the
// next scale-up is a cache hit.
func (b *Backend) Scale(ctx context.Context, ns, name string, replicas int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	now := time.Now()
	var want int
	res, err := b.timed(func() (lifecycle.Result, error) {
		res, n, err := b.core.Scale(ns, name, replicas, now)
		want = n
		return res, err
	})
	if err != nil {
		return err
	}
	if want != replicas {
		b.log.Info("replica count clamped to the function's scale bounds", zap.String("function", name), zap.Int("asked", replicas), zap.Int("set", want))
	}
	if err := b.commitLocked(&res); err != nil {
		return err
	}
	defer b.publishRouteLocked(key(ns, name))
	return b.applyLocked(res, now)
}

// timed runs one core operation and records its placement decisions with
// their share of its time.
func (b *Backend) timed(op func() (lifecycle.Result, error)) (lifecycle.Result, error) {
	began := time.Now()
	res, err := op()
	took := time.Since(began)
	for _, d := range res.Decisions {
		b.stats.Placed(d.Evicted, d.Err, took/time.Duration(len(res.Decisions)))
	}
	return res, err
}

// commitLocked carries out an operation's first effect, the record of the
// function it changed. When that fails the core undoes the operation and
// nothing else is carried out.
func (b *Backend) commitLocked(res *lifecycle.Result) error {
	if len(res.Effects) == 0 {
		return nil
	}
	if err := b.persist(res.Effects[0]); err != nil {
		b.core.Abort()
		return err
	}
	res.Effects = res.Effects[1:]
	return nil
}

func (b *Backend) persist(e lifecycle.Effect) error {
	switch e.Kind {
	case lifecycle.Write:
		data, err := encodeRecord(*e.Record)
		if err != nil {
			return err
		}
		if sum, ok := b.saved[e.Function]; !ok || sum != sha256.Sum256(data) {
			ns, name := splitKey(e.Function)
			if err := b.state.saveFunction(ns, name, data); err != nil {
				return err
			}
			b.saved[e.Function] = sha256.Sum256(data)
		}
	case lifecycle.Remove:
		ns, name := splitKey(e.Function)
		if err := b.state.deleteFunction(ns, name); err != nil {
			return err
		}
		delete(b.saved, e.Function)
	}
	return nil
}

// takeStopsLocked removes res's Stops of started replicas and Unparks and
// returns them as jobs, for Delete, which waits for them itself. They do
// not wait for their requests in flight: a function removed has its
// requests cut, and its DELETE answers once its processes are gone, not
// when its slowest request ends.
func (b *Backend) takeStopsLocked(res *lifecycle.Result, now time.Time) []stopJob {
	var jobs []stopJob
	kept := res.Effects[:0]
	for _, e := range res.Effects {
		switch e.Kind {
		case lifecycle.Stop:
			if j, ok := b.stopLocked(e, now); ok {
				j.inFlight = nil
				jobs = append(jobs, j)
			}
			continue
		case lifecycle.Unpark:
			if j, ok := b.unparkLocked(e); ok {
				jobs = append(jobs, j)
			}
			continue
		}
		kept = append(kept, e)
	}
	res.Effects = kept
	return jobs
}

// applyLocked carries out effects in order. Stops run in the background;
// a record that cannot be written is logged and the first such error
// returned.
func (b *Backend) applyLocked(res lifecycle.Result, now time.Time) error {
	var firstErr error
	var stops []stopJob
	for _, e := range res.Effects {
		switch e.Kind {
		case lifecycle.Write, lifecycle.Remove:
			if err := b.persist(e); err != nil {
				b.log.Error("save", zap.String("function", e.Function), zap.Error(err))
				if firstErr == nil {
					firstErr = err
				}
			}
		case lifecycle.Start:
			b.startLocked(e, now)
		case lifecycle.Stop:
			if j, ok := b.stopLocked(e, now); ok {
				stops = append(stops, j)
			}
		case lifecycle.Demote, lifecycle.Promote:
			ns, name := splitKey(e.Function)
			b.logs.Append(ns, name, e.Replica.ID, e.Why, now)
		case lifecycle.Park:
			b.parkLocked(e, now)
		case lifecycle.Unpark:
			if j, ok := b.unparkLocked(e); ok {
				stops = append(stops, j)
			}
		case lifecycle.LoadModel:
			b.loadModelLocked(e)
		}
	}
	for _, d := range res.Decisions {
		if d.Err == nil {
			continue
		}
		v, ok := b.core.Replica(d.Replica)
		if !ok || v.Reason == "" {
			continue
		}
		if r, seen := b.pendingReason[d.Replica]; seen && r == v.Reason {
			continue
		}
		b.pendingReason[d.Replica] = v.Reason
		ns, name := splitKey(v.Function)
		b.log.Info("replica pending", zap.String("function", name), zap.String("namespace", ns), zap.String("replica", v.ID), zap.String("reason", v.Reason))
		b.logs.Append(ns, name, v.ID, "pending: "+v.Reason, now)
	}
	for _, s := range res.Scaled {
		ns, name := splitKey(s.Function)
		b.log.Info("autoscaled", zap.String("function", name), zap.String("namespace", ns),
			zap.Int("added", s.Added), zap.Int("removed", s.Removed), zap.Int("replicas", s.Replicas), zap.Float64("rate", s.Rate), zap.String("reason", s.Reason))
		b.logs.Append(ns, name, "autoscaler", s.Reason, now)
	}
	b.stopLaterLocked(stops)
	touched := map[string]bool{}
	for _, e := range res.Effects {
		if e.Function != "" && !touched[e.Function] {
			touched[e.Function] = true
			b.publishRouteLocked(e.Function)
		}
	}
	return firstErr
}

// stopLocked forgets a started replica and returns the job that stops it.
func (b *Backend) stopLocked(e lifecycle.Effect, now time.Time) (stopJob, bool) {
	delete(b.pendingReason, e.Replica.ID)
	r := b.running[e.Replica.ID]
	if r == nil {
		return stopJob{}, false
	}
	delete(b.running, r.id)
	ns, name := splitKey(e.Function)
	switch e.Why {
	case "warm replica evicted: its GPU memory was needed":
		b.log.Info("warm replica evicted to free GPU memory", zap.String("function", name), zap.String("replica", r.id))
		b.logs.Append(ns, name, r.id, e.Why, now)
	case "warm replica expired":
		b.log.Info("warm replica expired", zap.String("function", name), zap.String("replica", r.id))
		b.logs.Append(ns, name, r.id, "replica removed", now)
	default:
		if e.Why != "" && e.Why != "function removed" && e.Why != "function updated" {
			// Consolidation's yields and moves given up, and replicas
			// retired where there are no warm ones: say why.
			b.log.Info("replica stopped", zap.String("function", name), zap.String("replica", r.id), zap.String("why", e.Why))
		}
		b.logs.Append(ns, name, r.id, "replica removed", now)
	}
	dir := r.dir
	if dir == "" {
		dir = b.state.replicaDir(r.id)
	}
	return stopJob{run: r.run, dir: dir, quiet: &r.quiet, inFlight: &r.inFlight}, true
}

func splitKey(k string) (ns, name string) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return "", k
}

func newReplicaID(fn string) string {
	var buf [4]byte
	_, _ = rand.Read(buf[:])
	return fn + "-" + hex.EncodeToString(buf[:])
}

// Query serves /system/logs.
func (b *Backend) Query(ctx context.Context, req logs.Request) (<-chan logs.Message, error) {
	return b.logs.Query(ctx, req)
}

// SetInventory follows this machine's GPUs when they change (a GPU gone
// from NVML, a node of an inventory file taken away): the replicas on GPUs
// that are gone stop and are placed again where they fit.
func (b *Backend) SetInventory(inv gpu.Inventory) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	now := time.Now()
	res, _ := b.timed(func() (lifecycle.Result, error) { return b.core.SetInventory(inv, now), nil })
	b.cfg.Inventory = inv
	_ = b.applyLocked(res, now)
}
