// Package lifecycle is the one place that decides what happens to a
// function's replicas: which exist, which slice each gets, where it is
// booked, when it is demoted to a warm replica, promoted back, drained and
// released. It holds functions and replicas as plain values; operations
// (deploy, update, scale, delete, restore) and observations (load from the
// proxy, a replica ready or gone, the cluster's GPUs) go in, and the
// effects to carry out come out.
//
// The core does no I/O, reads no clock and holds no lock: every call takes
// its time as an argument and the caller serialises calls. The local
// backend, the Kubernetes backend and the simulator's faas-gpu policy all
// drive this same code, so that a decision is written once and the
// simulator is evidence for the provider.
package lifecycle

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Phase is where a replica is in its life.
type Phase string

const (
	// Pending replicas wait for a GPU that fits them.
	Pending Phase = "pending"
	// Starting replicas are booked and launched, not yet ready.
	Starting Phase = "starting"
	// Ready replicas serve requests.
	Ready Phase = "ready"
	// Warm replicas keep their model and memory, out of service.
	Warm Phase = "warm"
	// Draining replicas were stopped; their booking is held until the
	// backend observes them gone, so a GPU is never given twice.
	Draining Phase = "draining"
)

// Options configure a Core.
type Options struct {
	// Profiles give slices, latencies and load times; nil: none.
	Profiles *profiles.Store
	// Autoscale tunes the SLO autoscaler.
	Autoscale scheduler.AutoscaleOptions
	// WarmTTL is how long an idle warm replica keeps its model; 0 takes
	// DefaultWarmTTL.
	WarmTTL time.Duration
	// NewID names a new replica of function name. nil numbers them
	// name-1, name-2, … per core, which is deterministic (the simulator
	// and tests); the provider passes random IDs so that a replica of a
	// redeployed function never meets an old one's leftovers.
	NewID func(name string) string
	// ConfirmStops holds a stopped replica's booking until the backend
	// reports it gone (ReplicaGone): on Kubernetes a pod may run on its
	// GPU for a while after its Deployment was scaled down. Without it a
	// booking is released when the Stop is issued.
	ConfirmStops bool
	// ConfirmDemotes holds a demoted replica's SM share until the backend
	// reports it out of routing (ReplicaDemoted): on Kubernetes its pod
	// serves until the writer has labelled it. Without it the share is
	// released when the Demote is issued.
	ConfirmDemotes bool
	// NoWarm stops a replica taken out of service instead of keeping it
	// warm (Kubernetes with -k8s-warm-replicas=false, scripted simulator
	// runs).
	NoWarm bool
	// Consolidate bounds consolidation (scheduler.Consolidate): the most
	// moves a pass, the cool-down; the zero value takes
	// scheduler.DefaultConsolidateOptions.
	Consolidate scheduler.ConsolidateOptions
	// NoConsolidate never moves a replica to free a GPU.
	NoConsolidate bool
	// NoStandby keeps no standby replicas (standby.go). Kubernetes sets
	// it: a standby's pod would serve from its start, as the pods of its
	// group do, until the writer labels it out of routing, and its
	// readiness is not yet reported for replicas out of service.
	NoStandby bool
	// CanPark says which functions the backend can keep processes of
	// started ahead of their placements, off the GPU (parked.go): those
	// whose process it can hand its GPU settings after its start. Each
	// keeps the number its spec asks (scheduler.ScalePolicy.Parked). nil:
	// none, every replica starts its own process. It is called during
	// operations, so it must not block or do I/O.
	CanPark func(scheduler.Function) bool
	// Plan overrides how a function's spec becomes its plan (the
	// simulator's batch cap); nil: scheduler.PlanFunction.
	Plan func(spec scheduler.Function, store *profiles.Store, product string) (scheduler.Plan, error)
}

// DefaultWarmTTL keeps an idle warm replica's model for 10 minutes.
const DefaultWarmTTL = 10 * time.Minute

// Core is the lifecycle of every function of one provider.
type Core struct {
	opts Options
	inv  gpu.Inventory
	// first is a pending replica placeAll tries before all others: one
	// another replica yielded its room to (overload.go).
	first   string
	product string
	// largestMemory is the inventory's largest GPU memory, kept with inv:
	// memoryPercent reads it for every function at every pass.
	largestMemory int64
	alloc         *scheduler.Allocator
	cache         *cache.Cache

	functions map[string]*function // key: namespace/name
	// order lists functions oldest first: older functions are placed
	// first. Kept sorted on insert, so a deploy costs no full sort.
	order    []*function
	replicas map[string]*replica // every replica the core knows, by ID
	// parkedBy names the function of every parked process, by ID.
	parkedBy map[string]string
	seq      uint64

	// undo holds the inverse of each change the current operation made,
	// for Abort.
	undo []func()
	// promoted are the Promote effects of the current operation, emitted
	// by placeAll in order.
	promoted []Effect

	// lastMove is when a consolidation move last began or ended: the
	// next pass waits a cool-down after it.
	lastMove time.Time
	// freeing are the GPUs (by UUID) consolidation is emptying: once
	// their moves are done, the warm replicas left there yield.
	freeing map[string]bool
	// settled are the GPUs whose moved replicas a replacement retired
	// since the last consolidation pass.
	settled map[string]bool
}

type function struct {
	key       string
	spec      scheduler.Function
	plan      scheduler.Plan
	desired   int
	createdAt time.Time
	// live are the replicas in service or on their way: pending, starting,
	// ready, oldest first.
	live []*replica
	// warm are out of service with their model, most recently idled last.
	warm []*replica

	load        Load
	lastRequest time.Time
	rate        scheduler.RateEstimator
	// rise follows the request count at every Rise pass as well as every
	// Tick: its last interval is the short one a rise shows in first.
	rise     scheduler.RateEstimator
	lastUp   time.Time
	lastDown time.Time
	// lastGrown is the last scale-up that placed a replica, not one that
	// took a warm replica back: consolidation holds the function's
	// replicas after the one (Core.fixed), not the other.
	lastGrown  time.Time
	lastResize time.Time
	// flap holds its pool after a scale-down that a scale-up undid with
	// misses in between (scheduler.FlapGuard).
	flap       scheduler.FlapGuard
	lastScale  string
	scaledUp   uint64
	scaledDown uint64
	// gaps are the last idle gaps seen between its requests (see
	// observeQuiet), for the warm replicas' lifetime; seen is the request
	// count at the last tick, quiet whether a tick since passed with none,
	// from the last request before it (quietFrom); resumed is the first
	// request after the last pause that was an idle gap
	// (scheduler.IsIdleGap), for resizing's cool-down.
	gaps      []time.Duration
	seen      uint64
	quiet     bool
	quietFrom time.Time
	resumed   time.Time
	// burst is its smoothed rate over the warm TTL, one a tick: whether
	// it is bursty decides if its warm model caches are kept (keepsCache).
	burst scheduler.RateHistory
	// yieldedAt is when consolidation last stopped one of its warm
	// replicas to free a GPU (yield), and yieldedRate what the ones
	// stopped since its last burst's onset served at its SLO
	// (yieldedSinceBurst).
	yieldedAt   time.Time
	yieldedRate float64
	// startup is how long its last replica took from placement to
	// ready: how early an expected burst's capacity must start.
	startup time.Duration
	// mix follows the models a multi-model function's requests name
	// (mix.go); nil for one model.
	mix *mixState
	// feedback corrects its capacity with the SLO misses the proxy
	// measured (scheduler.SLOFeedback); unsettledAt is the last tick it
	// had a replica not ready, one being replaced, or more waiting than
	// its replicas clear within the SLO (scheduler.SettledBacklog).
	feedback    scheduler.SLOFeedback
	unsettledAt time.Time
	// sloMenu values its slices at the SLO the feedback plans at.
	sloMenu sloMenu
	// parked are its processes started ahead of a placement (parked.go).
	parked parkedPool
	// parkStarts are its starts of the last parkedMemory, and parkWindow
	// how long its last parked process took to start: what a learnt
	// parked count is made of (ScalePolicy.ParkedAuto).
	parkStarts []time.Time
	parkWindow time.Duration
	// parkRefused is why one of its parked processes showed that its
	// server cannot be parked (ParkedRefused), until its spec is replaced;
	// "" while none has.
	parkRefused string
}

type replica struct {
	id     string
	fn     string
	config scheduler.SliceConfig
	phase  Phase
	// placement is nil while pending.
	placement    *scheduler.Placement
	pendingSince time.Time
	// placedAt is when it was placed: how much of its start a restart
	// loses (scheduler.RestartWithin). Zero for a restored one.
	placedAt time.Time
	// unsized: added before its load was known (grow: a deploy, a scale
	// by hand or from zero), with the base slice. A scale-up may replace
	// it right-sized once (replaceUnsized); what replaces it is sized for
	// the load.
	unsized bool
	// grows: a replacement of unsized replicas for a scale-up
	// (replaceUnsized), placed wherever the scale-up's adds would be, a
	// GPU not in use included.
	grows bool
	// opens: a replacement that saves a GPU's worth and may open one
	// (scheduler.Replacement.OpensGPU).
	opens bool
	// roomBy: such a replacement waits until then for room on a GPU in
	// use before it may open one (growUnsized); zero: it need not.
	roomBy     time.Time
	reason     string
	reasonCode scheduler.NoFitCode
	// demoting: warm, but its demote is not confirmed yet
	// (Options.ConfirmDemotes), so its SM share is still booked.
	demoting bool
	// replaces is the ID of the replica this one takes the place of once
	// Ready (make-before-break, replace.go), replacesMore those a merge
	// also retires then, replaceWhy the decision's reason; "": none.
	replaces     string
	replacesMore []string
	replaceWhy   string
	// loading is the model it was told to load (LoadModel) and was not
	// seen holding since loadingSince; "": none.
	loading      string
	loadingSince time.Time
	// replacedAt is when a replacement retired this replica to a warm
	// one; it is stopped at the next tick. Zero: not replaced.
	replacedAt time.Time
	// target is the only GPU (UUID) a replacement may be placed on: a
	// consolidation move's; "" for anywhere.
	target string
	// standby: started out of service, in fn.warm from its placement
	// (standby.go); Starting until ready, then Warm. A promotion ends it.
	standby bool
	// tentative: added for a tentative scale-up (scheduler.Decision), so
	// placed only on a GPU already in use, at once (addReplica).
	tentative bool
}

// New makes a core for inv; c is the model cache placement reads (nil: a
// fresh one).
func New(inv gpu.Inventory, c *cache.Cache, opts Options) *Core {
	if opts.Profiles == nil {
		opts.Profiles = profiles.NewStore()
	}
	if opts.Autoscale == (scheduler.AutoscaleOptions{}) {
		opts.Autoscale = scheduler.DefaultAutoscaleOptions
	}
	if opts.WarmTTL <= 0 {
		opts.WarmTTL = DefaultWarmTTL
	}
	if opts.Plan == nil {
		opts.Plan = scheduler.PlanFunction
	}
	if opts.Consolidate == (scheduler.ConsolidateOptions{}) {
		opts.Consolidate = scheduler.DefaultConsolidateOptions
	}
	if c == nil {
		c = cache.New(cache.DefaultOptions)
	}
	return &Core{
		opts: opts, inv: inv, product: inv.MainProduct(), largestMemory: inv.LargestMemory(), alloc: scheduler.NewAllocator(inv, c), cache: c,
		functions: map[string]*function{}, replicas: map[string]*replica{}, parkedBy: map[string]string{}, freeing: map[string]bool{}, settled: map[string]bool{},
	}
}

// Key names a function in the core and in its effects.
func Key(namespace, name string) string { return namespace + "/" + name }

// Inventory is the GPUs the core places on.
func (c *Core) Inventory() gpu.Inventory { return c.inv }

// Product is the GPU product slices are chosen for.
func (c *Core) Product() string { return c.product }

// Cache is the model cache the core's placements read.
func (c *Core) Cache() *cache.Cache { return c.cache }

// Allocator is the GPU bookings, for reports (scheduler.NodeReports).
func (c *Core) Allocator() *scheduler.Allocator { return c.alloc }

// Has reports whether function key exists.
func (c *Core) Has(key string) bool { _, ok := c.functions[key]; return ok }

// PlanFor is what the profiles make of spec on this core's GPUs, without
// changing anything.
func (c *Core) PlanFor(spec scheduler.Function) (scheduler.Plan, error) {
	return c.opts.Plan(spec, c.opts.Profiles, c.product)
}

// Check rejects what could never run: an SLO no slice meets, a slice
// larger than any GPU. An empty inventory (no GPU node yet) accepts all:
// replicas wait for nodes.
func (c *Core) Check(spec scheduler.Function) (scheduler.Plan, error) {
	pl, err := c.PlanFor(spec)
	if err != nil {
		return scheduler.Plan{}, err
	}
	if len(c.inv.Nodes) == 0 {
		return pl, nil
	}
	return pl, scheduler.CanEverFit(c.inv, pl.Request)
}

func (c *Core) newID(name string) string {
	if c.opts.NewID != nil {
		for {
			id := c.opts.NewID(name)
			if !c.taken(id) {
				return id
			}
		}
	}
	for {
		c.seq++
		id := name + "-" + strconv.FormatUint(c.seq, 10)
		if !c.taken(id) {
			return id
		}
	}
}

// taken reports whether id names a replica or a parked process already.
func (c *Core) taken(id string) bool {
	_, replica := c.replicas[id]
	_, parked := c.parkedBy[id]
	return replica || parked
}

// insert adds fn in age order.
func (c *Core) insert(fn *function) {
	i := sort.Search(len(c.order), func(i int) bool { return olderFirst(fn, c.order[i]) })
	c.order = append(c.order, nil)
	copy(c.order[i+1:], c.order[i:])
	c.order[i] = fn
	c.functions[fn.key] = fn
}

func (c *Core) unlink(fn *function) {
	for i, f := range c.order {
		if f == fn {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	delete(c.functions, fn.key)
}

func olderFirst(a, b *function) bool {
	if !a.createdAt.Equal(b.createdAt) {
		return a.createdAt.Before(b.createdAt)
	}
	return a.key < b.key
}

func notFound(key string) error {
	ns, name := splitKey(key)
	return fmt.Errorf("function %s.%s: %w", name, ns, errNotExist)
}

func splitKey(k string) (ns, name string) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return "", k
}
