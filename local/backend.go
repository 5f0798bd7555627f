package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
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
	// WarmTTL is how long an idle warm replica keeps its model before it
	// is stopped.
	WarmTTL time.Duration
	// NodeLoadFactor is the share of a cold load a load from the node tier
	// (host memory or local disk) takes.
	NodeLoadFactor float64
	Log            *zap.Logger
}

// Backend runs functions as local processes or emulated GPU workers, placed
// on the inventory's GPUs by the scheduler.
type Backend struct {
	cfg     Config
	log     *zap.Logger
	alloc   *scheduler.Allocator
	cache   *cache.Cache
	state   *stateStore
	logs    *logHub
	stats   *scheduler.StatsRecorder
	product string // the GPU product profiles are chosen for
	stop    chan struct{}
	done    chan struct{}

	mu        sync.Mutex
	functions map[string]*function // key: namespace/name
	// order is every function in placement order, oldest first (see
	// olderThan), kept as functions come and go: sorting them for each
	// change cost 0.8 ms under the lock at 5,000 functions.
	order      []*function
	namespaces map[string]types.FunctionNamespace
	closed     bool

	// stopping counts the replica stops that run once the lock is let go
	// (update, delete, eviction, expiry), so that Close waits for every
	// process a replica started. Add only under mu while not closed.
	stopping sync.WaitGroup
	// stopCtx is the context of those stops; Close cancels it when its own
	// context ends first, and each stop then kills its process group at once.
	stopCtx     context.Context
	cancelStops context.CancelFunc

	// quarantined counts the state records moved aside at start-up.
	quarantined atomic.Uint64

	// waiting counts the requests the proxy's dispatcher queues for a
	// replica, per function (key: namespace/name), as it reports them
	// (Queued). Its own lock: the dispatcher reports under its lock.
	waitingMu sync.Mutex
	waiting   map[string]int
}

type function struct {
	spec      scheduler.Function // as deployed
	plan      scheduler.Plan     // what the profiles made of it
	desired   int
	createdAt time.Time
	replicas  []*replica // placed or pending, in service
	idle      []*replica // warm: model in memory, out of service, most recent last
	// saved is the record as last written or read at start-up: a record
	// equal to it is not written again.
	saved []byte

	requests    atomic.Uint64
	lastRequest atomic.Int64 // unix nanoseconds
	rate        scheduler.RateEstimator
	lastUp      time.Time
	lastDown    time.Time
	lastScale   string
	// scaledUp and scaledDown count the autoscaler's decisions applied.
	scaledUp, scaledDown uint64
}

type replica struct {
	id           string
	config       scheduler.SliceConfig
	placement    *scheduler.Placement
	pendingSince time.Time
	reason       string
	reasonCode   scheduler.NoFitCode
	run          runner
	emulated     bool
	inFlight     atomic.Int64
	// readyAfter is how long the replica took from placement to ready, in
	// nanoseconds; 0 until it is ready. Set once, by the start-up watch.
	readyAfter atomic.Int64
	// quiet is set once the replica is stopped: output that comes later
	// (a grandchild's, say) is dropped, so a deleted function's log ring
	// does not come back.
	quiet atomic.Bool
}

// errClosed answers changes asked of a closed backend: it would start
// replicas nothing stops.
var errClosed = errors.New("local backend is closed")

func key(ns, name string) string { return ns + "/" + name }

// New opens the state dir, restores every function with its placements and
// starts its replicas and, with a Tick, the autoscaler.
func New(cfg Config) (*Backend, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.MPSPipeDir == "" {
		cfg.MPSPipeDir = "/tmp/nvidia-mps"
	}
	if cfg.Profiles == nil {
		cfg.Profiles = profiles.NewStore()
	}
	if cfg.Autoscale == (scheduler.AutoscaleOptions{}) {
		cfg.Autoscale = scheduler.DefaultAutoscaleOptions
	}
	if cfg.WarmTTL <= 0 {
		cfg.WarmTTL = 10 * time.Minute
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
	b := &Backend{
		stopCtx:     stopCtx,
		cancelStops: cancelStops,
		cfg:         cfg,
		log:         cfg.Log,
		alloc:       scheduler.NewAllocator(cfg.Inventory, c),
		cache:       c,
		state:       st,
		logs:        newLogHub(2000),
		stats:       scheduler.NewStatsRecorder(),
		product:     cfg.Inventory.MainProduct(),
		functions:   map[string]*function{},
		waiting:     map[string]int{},
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	if err := b.restore(); err != nil {
		cancelStops()
		st.close()
		return nil, err
	}
	if cfg.Tick > 0 {
		go b.loop(cfg.Tick)
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
	recs, bad, err := b.state.loadFunctions()
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
		b.rebuildNamespaces(recs)
	}
	if _, ok := b.namespaces[DefaultNamespace]; !ok {
		b.namespaces[DefaultNamespace] = types.FunctionNamespace{Name: DefaultNamespace, Labels: map[string]string{"openfaas": "1"}}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	for _, rec := range recs {
		pl, err := b.planFor(rec.Function)
		if err != nil {
			b.log.Warn("function's profile changed; keeping its stored request", zap.String("function", rec.Function.Name()), zap.Error(err))
			pl = scheduler.Plan{Request: rec.Function.GPU, Base: scheduler.SliceConfig{SMPercent: rec.Function.GPU.SliceOn(gpu.Device{}).SMPercent, Batch: 1}, Decision: err.Error()}
		}
		fn := &function{spec: rec.Function, plan: pl, desired: rec.Replicas, createdAt: rec.CreatedAt, saved: rec.raw}
		for _, pr := range rec.Placed {
			r := &replica{id: pr.ID, config: pr.Config, pendingSince: now}
			if r.config.SMPercent == 0 {
				r.config = pl.Base
			}
			p := pr.Placement
			if err := b.alloc.Restore(pr.ID, p); err != nil {
				b.log.Warn("placement not restored, replica pending", zap.String("replica", pr.ID), zap.Error(err))
				if !pr.Idle {
					fn.replicas = append(fn.replicas, r)
				}
				continue
			}
			r.placement = &p
			if pr.Idle {
				_ = b.alloc.Demote(pr.ID, now)
				fn.idle = append(fn.idle, r)
			} else {
				fn.replicas = append(fn.replicas, r)
			}
		}
		b.addLocked(fn)
		b.growLocked(fn, now)
		b.log.Info("function restored", zap.String("function", rec.Function.Name()), zap.String("namespace", rec.Function.Namespace()),
			zap.Int("replicas", rec.Replicas), zap.Int("placed", len(rec.Placed)))
	}
	for _, fn := range b.sortedFunctionsLocked() {
		for _, r := range append(append([]*replica{}, fn.replicas...), fn.idle...) {
			if r.placement != nil {
				b.startLocked(fn, r, now)
			}
		}
	}
	b.reconcileLocked(now, nil)
	// Only records that changed (a placement lost or new) are written: a
	// restart costs no write per function.
	for _, fn := range b.sortedFunctionsLocked() {
		b.saveLogged(fn)
	}
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

// Close stops the autoscaler and every replica; functions stay in the
// state dir.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	close(b.stop)
	var jobs []stopJob
	for _, fn := range b.functions {
		for _, r := range append(append([]*replica{}, fn.replicas...), fn.idle...) {
			if r.run != nil {
				jobs = append(jobs, stopJob{run: r.run, quiet: &r.quiet})
			}
		}
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

// stopJob is a removed replica still to stop and clean up.
type stopJob struct {
	run   runner
	dir   string
	quiet *atomic.Bool // the replica's: set once it is stopped
}

func stopAll(ctx context.Context, jobs []stopJob) {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
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

// Deploy creates a function with its initial replicas.
func (b *Backend) Deploy(ctx context.Context, spec scheduler.Function) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	ns, name := spec.Namespace(), spec.Name()
	pl, err := b.checkLocked(spec)
	if err != nil {
		return err
	}
	if _, ok := b.functions[key(ns, name)]; ok {
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrExist)
	}
	now := time.Now()
	fn := &function{spec: spec, plan: pl, desired: spec.Scale.InitialReplicas(), createdAt: now.UTC()}
	fn.lastRequest.Store(now.UnixNano()) // a new function is not idle yet
	b.addLocked(fn)
	b.growLocked(fn, now)
	err = b.commitLocked(fn, now, func() {
		b.removeLocked(fn)
		// What placing it logged (pending reasons) belongs to no function.
		b.logs.Forget(ns, name)
	})
	if err != nil {
		return fmt.Errorf("deploy %s.%s: %w", name, ns, err)
	}
	b.log.Info("slice chosen", zap.String("function", name), zap.String("decision", pl.Decision))
	return nil
}

// commitLocked makes a change to fn durable before it takes effect: it
// places fn's pending replicas, writes fn's record, and only then starts
// them and places the other functions' pending replicas. When the record
// cannot be written, the bookings are released, undo puts fn back as it
// was, and the error is returned: nothing of the change runs. (A warm
// replica of another function evicted to make room stays evicted: a model
// cache entry, not a function's state.)
func (b *Backend) commitLocked(fn *function, now time.Time, undo func()) error {
	placed, evicted, touched := b.placeLocked(fn, now)
	err := b.saveLocked(fn)
	if err != nil {
		for _, r := range placed {
			if rerr := b.alloc.Release(r.id, now); rerr != nil {
				b.log.Error("release", zap.String("replica", r.id), zap.Error(rerr))
			}
			r.placement = nil
		}
		undo()
	} else {
		for _, r := range placed {
			b.startLocked(fn, r, now)
		}
	}
	for _, f := range touched {
		if f != fn {
			b.saveLogged(f)
		}
	}
	b.stopLaterLocked(evicted)
	b.reconcileLocked(now, fn)
	return err
}

// fnState is what a change to a function's replica count may touch, kept
// to undo it.
type fnState struct {
	desired     int
	replicas    []*replica
	idle        []*replica
	lastRequest int64
}

func (fn *function) state() fnState {
	return fnState{desired: fn.desired, replicas: append([]*replica(nil), fn.replicas...),
		idle: append([]*replica(nil), fn.idle...), lastRequest: fn.lastRequest.Load()}
}

// rollbackLocked puts fn's replicas back as in s, after a change whose
// record was not written: warm replicas put in service go warm again and
// replicas made warm go back in service. Its new placements are already
// released (commitLocked); a warm replica evicted meanwhile stays gone.
func (b *Backend) rollbackLocked(fn *function, s fnState, now time.Time) {
	wasIdle, present := map[*replica]bool{}, map[*replica]bool{}
	for _, r := range s.idle {
		wasIdle[r] = true
	}
	for _, r := range append(append([]*replica{}, fn.replicas...), fn.idle...) {
		present[r] = true
	}
	// Demotions first: they free the SM % the promotions take back.
	for _, r := range fn.replicas {
		if wasIdle[r] && r.placement != nil {
			if err := b.alloc.Demote(r.id, now); err != nil {
				b.log.Error("undo: demote", zap.String("replica", r.id), zap.Error(err))
			}
		}
	}
	for _, r := range fn.idle {
		if !wasIdle[r] {
			if err := b.alloc.Promote(r.id); err != nil {
				b.log.Error("undo: promote", zap.String("replica", r.id), zap.Error(err))
			}
		}
	}
	fn.desired, fn.replicas, fn.idle = s.desired, s.replicas, fn.idle[:0]
	for _, r := range s.idle {
		if present[r] {
			fn.idle = append(fn.idle, r)
		}
	}
	fn.lastRequest.Store(s.lastRequest)
}

// Update replaces a function's spec and restarts its replicas on it, all
// stopped before the new ones are placed: a GPU has no room for a surge.
func (b *Backend) Update(ctx context.Context, spec scheduler.Function) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return errClosed
	}
	ns, name := spec.Namespace(), spec.Name()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	pl, err := b.checkLocked(spec)
	if err != nil {
		return err
	}
	// The new spec is written before anything changes: a write that fails
	// leaves the function as it was, its replicas running. Its placements
	// follow once the new replicas are placed; a restart in between places
	// them afresh.
	desired := spec.Scale.Clamp(fn.desired)
	data, err := encodeRecord(functionRecord{Function: spec, Replicas: desired, CreatedAt: fn.createdAt})
	if err != nil {
		return fmt.Errorf("update %s.%s: %w", name, ns, err)
	}
	if err := b.state.saveFunction(ns, name, data); err != nil {
		return fmt.Errorf("update %s.%s: %w", name, ns, err)
	}
	fn.saved = data
	now := time.Now()
	stopped := b.dropAllLocked(fn, now)
	fn.spec, fn.plan, fn.desired = spec, pl, desired
	b.growLocked(fn, now)
	b.reconcileLocked(now, nil)
	b.stopLaterLocked(stopped)
	return nil
}

// checkLocked rejects what could never run (an unknown namespace, a missing
// secret, a slice larger than any GPU, an SLO no slice meets) and returns
// the function's plan.
func (b *Backend) checkLocked(spec scheduler.Function) (scheduler.Plan, error) {
	ns := spec.Namespace()
	if _, ok := b.namespaces[ns]; !ok {
		return scheduler.Plan{}, &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist", ns)}
	}
	for _, s := range spec.Deployment.Secrets {
		if !b.state.secretExists(ns, s) {
			return scheduler.Plan{}, &gpu.FieldError{Field: "secrets", Reason: fmt.Sprintf("secret %q not found in namespace %s", s, ns)}
		}
	}
	pl, err := b.planFor(spec)
	if err != nil {
		return scheduler.Plan{}, err
	}
	return pl, scheduler.CanEverFit(b.cfg.Inventory, pl.Request)
}

// Delete removes a function and its replicas.
func (b *Backend) Delete(ctx context.Context, ns, name string) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return errClosed
	}
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	// The record goes first: one that stays would bring the function back
	// at the next start.
	if err := b.state.deleteFunction(ns, name); err != nil {
		b.mu.Unlock()
		return err
	}
	now := time.Now()
	stopped := b.dropAllLocked(fn, now)
	b.removeLocked(fn)
	b.reconcileLocked(now, nil)
	b.stopping.Add(1)
	b.mu.Unlock()
	defer b.stopping.Done()

	stopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(b.stopCtx, cancel)()
	stopAll(stopCtx, stopped)
	// Only now, with the replicas gone and what they printed on the way
	// out logged (quiet drops anything later), does the ring go; unless a
	// function of that name was deployed meanwhile and writes to it.
	b.mu.Lock()
	if _, again := b.functions[key(ns, name)]; !again {
		b.logs.Forget(ns, name)
	}
	b.mu.Unlock()
	return nil
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
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	want := fn.spec.Scale.Clamp(replicas)
	if want != replicas {
		b.log.Info("replica count clamped to the function's scale bounds", zap.String("function", name), zap.Int("asked", replicas), zap.Int("set", want))
	}
	now := time.Now()
	before := fn.state()
	if want > fn.desired {
		fn.lastRequest.Store(now.UnixNano()) // a scale-up is demand: not idle
	}
	b.setDesiredLocked(fn, want, now)
	if err := b.commitLocked(fn, now, func() { b.rollbackLocked(fn, before, now) }); err != nil {
		return fmt.Errorf("scale %s.%s: %w", name, ns, err)
	}
	return nil
}

// setDesiredLocked grows or shrinks fn to n replicas: growth reuses warm
// replicas first, shrinking drops pending replicas first, then keeps the
// newest placed ones warm.
func (b *Backend) setDesiredLocked(fn *function, n int, now time.Time) {
	fn.desired = n
	for len(fn.replicas) > n {
		victim := len(fn.replicas) - 1
		for i := len(fn.replicas) - 1; i >= 0; i-- {
			if fn.replicas[i].placement == nil {
				victim = i
				break
			}
		}
		b.retireLocked(fn, victim, now)
	}
	b.growLocked(fn, now)
}

// retireLocked takes replica i out of service: a pending one is forgotten,
// a placed one becomes an idle warm replica.
func (b *Backend) retireLocked(fn *function, i int, now time.Time) {
	r := fn.replicas[i]
	fn.replicas = append(fn.replicas[:i], fn.replicas[i+1:]...)
	if r.placement == nil {
		return
	}
	if err := b.alloc.Demote(r.id, now); err != nil {
		b.log.Error("demote", zap.String("replica", r.id), zap.Error(err))
	}
	fn.idle = append(fn.idle, r)
	b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), r.id, "scaled down: kept warm, model in memory, out of service", now)
}

// growLocked brings fn up to its desired count: warm replicas first, most
// recently idle first, then new pending replicas of the base slice.
func (b *Backend) growLocked(fn *function, now time.Time) {
	for len(fn.replicas) < fn.desired && b.promoteLocked(fn, fn.plan.Base, false) {
	}
	for len(fn.replicas) < fn.desired {
		fn.replicas = append(fn.replicas, &replica{id: newReplicaID(fn.spec.Name()), config: fn.plan.Base, pendingSince: now.UTC()})
	}
}

// promoteLocked puts one of fn's warm replicas back in service, preferring
// one of config c when exact. It reports whether one came back.
func (b *Backend) promoteLocked(fn *function, c scheduler.SliceConfig, exact bool) bool {
	for i := len(fn.idle) - 1; i >= 0; i-- {
		r := fn.idle[i]
		if exact && r.config.SMPercent != c.SMPercent {
			continue
		}
		if err := b.alloc.Promote(r.id); err != nil {
			continue // its SM share went to someone else meanwhile
		}
		fn.idle = append(fn.idle[:i], fn.idle[i+1:]...)
		fn.replicas = append(fn.replicas, r)
		b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), r.id, "scaled up: warm replica back in service, no model load", time.Now())
		return true
	}
	return false
}

// dropAllLocked releases every replica of fn, in service or warm, and
// returns them to stop.
func (b *Backend) dropAllLocked(fn *function, now time.Time) []stopJob {
	var jobs []stopJob
	for _, r := range append(append([]*replica{}, fn.replicas...), fn.idle...) {
		jobs = append(jobs, b.releaseLocked(fn, r, now))
	}
	fn.replicas, fn.idle = nil, nil
	return jobs
}

func (b *Backend) releaseLocked(fn *function, r *replica, now time.Time) stopJob {
	if r.placement != nil {
		if err := b.alloc.Release(r.id, now); err != nil {
			b.log.Error("release", zap.String("replica", r.id), zap.Error(err))
		}
	}
	if r.run != nil {
		b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), r.id, "replica removed", now)
	}
	return stopJob{run: r.run, dir: b.state.replicaDir(r.id), quiet: &r.quiet}
}

// sortedFunctionsLocked is every function, oldest first. The slice is the
// backend's own: callers read it under the lock and never keep or change it.
func (b *Backend) sortedFunctionsLocked() []*function { return b.order }

// olderThan is placement order: oldest first, then by namespace/name, so
// that ties (a restore, a coarse clock) still give one order.
func olderThan(a, c *function) bool {
	if !a.createdAt.Equal(c.createdAt) {
		return a.createdAt.Before(c.createdAt)
	}
	return key(a.spec.Namespace(), a.spec.Name()) < key(c.spec.Namespace(), c.spec.Name())
}

// addLocked registers fn. A new function is almost always the newest, so
// the search ends at the back and the insert is an append.
func (b *Backend) addLocked(fn *function) {
	b.functions[key(fn.spec.Namespace(), fn.spec.Name())] = fn
	i := sort.Search(len(b.order), func(i int) bool { return olderThan(fn, b.order[i]) })
	b.order = slices.Insert(b.order, i, fn)
}

// removeLocked forgets fn.
func (b *Backend) removeLocked(fn *function) {
	delete(b.functions, key(fn.spec.Namespace(), fn.spec.Name()))
	i := sort.Search(len(b.order), func(i int) bool { return !olderThan(b.order[i], fn) })
	if i < len(b.order) && b.order[i] == fn {
		b.order = slices.Delete(b.order, i, i+1)
	}
}

// saveLocked writes fn's record, unless it is the one last written: every
// change writes it once, however many steps saved along the way.
func (b *Backend) saveLocked(fn *function) error {
	rec := functionRecord{Function: fn.spec, Replicas: fn.desired, CreatedAt: fn.createdAt}
	for _, r := range fn.replicas {
		if r.placement != nil {
			rec.Placed = append(rec.Placed, replicaRecord{ID: r.id, Placement: *r.placement, Config: r.config})
		}
	}
	for _, r := range fn.idle {
		rec.Placed = append(rec.Placed, replicaRecord{ID: r.id, Placement: *r.placement, Config: r.config, Idle: true})
	}
	data, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	if bytes.Equal(data, fn.saved) {
		return nil
	}
	if err := b.state.saveFunction(fn.spec.Namespace(), fn.spec.Name(), data); err != nil {
		return err
	}
	fn.saved = data
	return nil
}

// saveLogged is saveLocked where no caller waits for the answer (the
// autoscaler, evictions, start-up): a failure is logged, and the next save
// of the function tries again, as its record still differs.
func (b *Backend) saveLogged(fn *function) {
	if err := b.saveLocked(fn); err != nil {
		b.log.Error("function record not saved", zap.String("function", fn.spec.Name()), zap.String("namespace", fn.spec.Namespace()), zap.Error(err))
	}
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
