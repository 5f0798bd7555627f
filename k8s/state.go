package k8s

import (
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
)

// state is what the provider decided: every function, its replica groups
// (one Deployment each) and pending replicas, and every GPU booking in the
// allocator. It is plain memory, no API calls: sync.go makes the cluster
// match it. The leader rebuilds it from the cluster when it takes over
// (restore.go); a standby rebuilds a copy for each read.
type state struct {
	inv      gpu.Inventory
	product  string
	alloc    *scheduler.Allocator
	cache    *cache.Cache
	profiles *profiles.Store
	log      *zap.Logger
	// stats count this instance's decisions and the start-ups it saw while
	// leading; a standby's rebuilt view has none.
	stats *scheduler.StatsRecorder
	// since is when the state was made; started holds the pods whose
	// start-up is counted (podUpdated).
	since   time.Time
	started map[types.UID]bool

	functions map[string]*function // key: namespace/name
	// drains are bookings of replicas taken away whose pods may still run
	// on their GPU: they are released only once the pods are gone, so the
	// GPU is never given twice. Key: namespace/group.
	drains map[string]*drain
	// deploymentExists tells whether a Deployment of that name is still in
	// the cluster (nil: never), so a new group does not take its name.
	deploymentExists func(ns, name string) bool
}

type function struct {
	spec      scheduler.Function
	plan      scheduler.Plan
	desired   int
	createdAt time.Time
	groups    map[string]*group // by Deployment name
	pending   []*pendingReplica

	rate scheduler.RateEstimator
	// busySince is when the function was deployed, scaled up or taken
	// over by this leader: it is not idle before then, whatever the
	// proxy counted.
	busySince time.Time
	lastUp    time.Time
	lastDown  time.Time
	lastScale string
	// scaledUp and scaledDown count the autoscaler's decisions applied.
	scaledUp, scaledDown uint64
}

// group is the replicas of a function that share a placement: one
// Deployment whose replica count is len(ids).
type group struct {
	name      string
	placement scheduler.Placement
	config    scheduler.SliceConfig
	ids       []string // allocator bookings, one per replica
}

type pendingReplica struct {
	id         string
	config     scheduler.SliceConfig
	since      time.Time
	reason     string
	reasonCode scheduler.NoFitCode
}

type drain struct {
	fn, ns, group string
	ids           []string
}

func newState(inv gpu.Inventory, store *profiles.Store, log *zap.Logger) *state {
	if store == nil {
		store = profiles.NewStore()
	}
	if log == nil {
		log = zap.NewNop()
	}
	c := cache.New(cache.DefaultOptions)
	return &state{
		inv: inv, product: inv.MainProduct(), alloc: scheduler.NewAllocator(inv, c), cache: c, profiles: store, log: log,
		stats: scheduler.NewStatsRecorder(), since: time.Now(), started: map[types.UID]bool{},
		functions: map[string]*function{}, drains: map[string]*drain{},
	}
}

func (f *function) key() string { return fnKey(f.spec.Namespace(), f.spec.Name()) }

func (f *function) placed() int {
	n := 0
	for _, g := range f.groups {
		n += len(g.ids)
	}
	return n
}

func (f *function) sortedGroups() []*group {
	out := make([]*group, 0, len(f.groups))
	for _, g := range f.groups {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// sortedFunctions is oldest first: older functions are placed first.
func (s *state) sortedFunctions() []*function {
	out := make([]*function, 0, len(s.functions))
	for _, f := range s.functions {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].createdAt.Equal(out[j].createdAt) {
			return out[i].createdAt.Before(out[j].createdAt)
		}
		return out[i].key() < out[j].key()
	})
	return out
}

func (s *state) planFor(spec scheduler.Function) (scheduler.Plan, error) {
	return scheduler.PlanFunction(spec, s.profiles, s.product)
}

// fallbackPlan keeps a restored function running as stored when its
// profile no longer gives a plan.
func fallbackPlan(spec scheduler.Function, err error) scheduler.Plan {
	return scheduler.Plan{Request: spec.GPU, Base: scheduler.SliceConfig{SMPercent: spec.GPU.SliceOn(gpu.Device{}).SMPercent, Batch: 1}, Decision: err.Error()}
}

// check rejects what could never run: an SLO no slice meets, a slice
// larger than any GPU. An empty inventory (no GPU node yet) accepts all:
// replicas wait for nodes.
func (s *state) check(spec scheduler.Function) (scheduler.Plan, error) {
	pl, err := s.planFor(spec)
	if err != nil {
		return scheduler.Plan{}, err
	}
	if len(s.inv.Nodes) == 0 {
		return pl, nil
	}
	return pl, scheduler.CanEverFit(s.inv, pl.Request)
}

func notFound(ns, name string) error {
	return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
}

// deploy adds a function with its initial replicas, placed where they fit.
func (s *state) deploy(spec scheduler.Function, pl scheduler.Plan, now time.Time) error {
	k := fnKey(spec.Namespace(), spec.Name())
	if _, ok := s.functions[k]; ok {
		return fmt.Errorf("function %s.%s: %w", spec.Name(), spec.Namespace(), fs.ErrExist)
	}
	fn := &function{spec: spec, plan: pl, desired: spec.Scale.InitialReplicas(), createdAt: now.UTC().Truncate(time.Second), groups: map[string]*group{}, busySince: now}
	s.functions[k] = fn
	s.grow(fn, now)
	return nil
}

// update replaces a function's spec. When its slice is unchanged the
// replicas keep their GPUs and their pods are replaced in place (Recreate);
// otherwise every replica is taken away (its booking held until its pods
// are gone) and placed afresh, so old and new never share a GPU beyond it.
func (s *state) update(spec scheduler.Function, pl scheduler.Plan, now time.Time) error {
	fn, ok := s.functions[fnKey(spec.Namespace(), spec.Name())]
	if !ok {
		return notFound(spec.Namespace(), spec.Name())
	}
	same := fn.plan.RequestFor(fn.plan.Base) == pl.RequestFor(pl.Base) && fn.plan.Base == pl.Base && !fn.plan.Autoscaled && !pl.Autoscaled
	fn.spec, fn.plan = spec, pl
	fn.desired = spec.Scale.Clamp(fn.desired)
	if !same {
		for _, g := range fn.sortedGroups() {
			s.retire(fn, g, len(g.ids))
		}
		fn.pending = nil
	}
	s.setDesired(fn, fn.desired, now)
	return nil
}

// remove deletes a function; its bookings drain as its pods go.
func (s *state) remove(ns, name string) error {
	fn, ok := s.functions[fnKey(ns, name)]
	if !ok {
		return notFound(ns, name)
	}
	for _, g := range fn.sortedGroups() {
		s.retire(fn, g, len(g.ids))
	}
	delete(s.functions, fn.key())
	return nil
}

// scale sets the desired count inside the function's bounds.
func (s *state) scale(ns, name string, n int, now time.Time) (int, error) {
	fn, ok := s.functions[fnKey(ns, name)]
	if !ok {
		return 0, notFound(ns, name)
	}
	want := fn.spec.Scale.Clamp(n)
	s.setDesired(fn, want, now)
	return want, nil
}

// setDesired grows fn with pending replicas or shrinks it: pending replicas
// go first, then replicas of the smallest groups, the last GPUs first, so
// whole GPUs free up.
func (s *state) setDesired(fn *function, n int, now time.Time) {
	fn.desired = n
	for len(fn.pending) > 0 && fn.placed()+len(fn.pending) > n {
		fn.pending = fn.pending[:len(fn.pending)-1]
	}
	for fn.placed() > n {
		var victim *group
		for _, g := range fn.sortedGroups() {
			if victim == nil || len(g.ids) < len(victim.ids) || len(g.ids) == len(victim.ids) && placedLater(g, victim) {
				victim = g
			}
		}
		s.retire(fn, victim, 1)
	}
	s.grow(fn, now)
}

// placedLater orders groups as best-fit placement fills GPUs (node, then
// GPU), so scaling down empties the GPUs filled last.
func placedLater(a, b *group) bool {
	if a.placement.Node != b.placement.Node {
		return a.placement.Node > b.placement.Node
	}
	return strings.Join(a.placement.GPUs, ",") > strings.Join(b.placement.GPUs, ",")
}

// grow adds pending replicas of the base slice up to the desired count.
func (s *state) grow(fn *function, now time.Time) {
	for fn.placed()+len(fn.pending) < fn.desired {
		fn.pending = append(fn.pending, &pendingReplica{id: newReplicaID(fn.spec.Name()), config: fn.plan.Base, since: now.UTC()})
	}
}

// retire takes the last n replicas out of group g: their bookings drain.
func (s *state) retire(fn *function, g *group, n int) {
	n = min(n, len(g.ids))
	if n <= 0 {
		return
	}
	gone := g.ids[len(g.ids)-n:]
	g.ids = g.ids[:len(g.ids)-n]
	dk := fnKey(fn.spec.Namespace(), g.name)
	d, ok := s.drains[dk]
	if !ok {
		d = &drain{fn: fn.key(), ns: fn.spec.Namespace(), group: g.name}
		s.drains[dk] = d
	}
	d.ids = append(d.ids, gone...)
	if len(g.ids) == 0 {
		delete(fn.groups, g.name)
	}
}

// retireID takes one replica, pending or placed, away by booking ID.
func (s *state) retireID(fn *function, id string) {
	for i, p := range fn.pending {
		if p.id == id {
			fn.pending = append(fn.pending[:i], fn.pending[i+1:]...)
			return
		}
	}
	for _, g := range fn.groups {
		for i, gid := range g.ids {
			if gid == id {
				// Move it last, then retire the last one.
				g.ids = append(append(g.ids[:i:i], g.ids[i+1:]...), id)
				s.retire(fn, g, 1)
				return
			}
		}
	}
}

// groupSize is how many replicas group name of function k should have.
func (s *state) groupSize(k, name string) int {
	if fn, ok := s.functions[k]; ok {
		if g, ok := fn.groups[name]; ok {
			return len(g.ids)
		}
	}
	return 0
}

// checkDrains releases the bookings of groups that are down to their
// size: settled says whether no more than size pods of the group may still
// run (terminating ones included) or be created. It returns the drains it
// ended.
func (s *state) checkDrains(settled func(ns, group string, size int) bool, now time.Time) []*drain {
	var released []*drain
	keys := make([]string, 0, len(s.drains))
	for k := range s.drains {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		d := s.drains[k]
		if !settled(d.ns, d.group, s.groupSize(d.fn, d.group)) {
			continue
		}
		for _, id := range d.ids {
			_ = s.alloc.Release(id, now) // already gone with a lost node: nothing to free
		}
		delete(s.drains, k)
		released = append(released, d)
	}
	return released
}

// groupAt is fn's group with placement p and slice c, if any.
func (f *function) groupAt(p scheduler.Placement, c scheduler.SliceConfig) *group {
	key := groupName(f.spec.Name(), p, c)
	for _, g := range f.groups {
		if groupName(f.spec.Name(), g.placement, g.config) == key {
			return g
		}
	}
	return nil
}

// freeGroupName names a new group: by its placement, unless a Deployment
// of that name still drains or is being deleted; a new one of the same
// name would then wait for it, and their pods would count together.
func (s *state) freeGroupName(fn *function, p scheduler.Placement, c scheduler.SliceConfig) string {
	name := groupName(fn.spec.Name(), p, c)
	ns := fn.spec.Namespace()
	for i := 2; s.nameBusy(ns, name); i++ {
		name = groupNameN(fn.spec.Name(), p, c, i)
	}
	return name
}

func (s *state) nameBusy(ns, name string) bool {
	if _, ok := s.drains[fnKey(ns, name)]; ok {
		return true
	}
	return s.deploymentExists != nil && s.deploymentExists(ns, name)
}

// placePending places pending replicas, oldest function first, and
// returns the functions whose groups changed.
func (s *state) placePending(now time.Time) map[string]bool {
	dirty := map[string]bool{}
	for _, fn := range s.sortedFunctions() {
		var still []*pendingReplica
		for _, r := range fn.pending {
			req := fn.plan.RequestFor(r.config)
			began := time.Now() // not now: a test may pass a made-up time
			p, evicted, err := s.alloc.Place(r.id, req, scheduler.Hints{Model: fn.plan.Request.Model, Now: now, Speed: s.speedFor(fn, r.config)})
			s.stats.Placed(evicted, err, time.Since(began))
			if err != nil {
				if r.reason != err.Error() {
					r.reason, r.reasonCode = err.Error(), scheduler.NoFitCodeOf(err)
					s.log.Info("replica pending", zap.String("function", fn.spec.Name()), zap.String("namespace", fn.spec.Namespace()), zap.String("reason", r.reason))
				}
				still = append(still, r)
				continue
			}
			for _, id := range evicted { // no warm replicas in Kubernetes mode: never happens
				_ = s.alloc.Release(id, now)
			}
			g := fn.groupAt(p, r.config)
			if g == nil {
				g = &group{name: s.freeGroupName(fn, p, r.config), placement: p, config: r.config}
				fn.groups[g.name] = g
			}
			g.ids = append(g.ids, r.id)
			s.cache.Preload(r.id, fn.plan.Request.Model, modelBytes(fn.plan), now)
			dirty[fn.key()] = true
		}
		fn.pending = still
	}
	return dirty
}

// speedFor is the profiled throughput of fn's model at slice c on each
// product, for the placement's preference for fast GPUs.
func (s *state) speedFor(fn *function, c scheduler.SliceConfig) func(string) float64 {
	model := fn.plan.Request.Model
	return func(product string) float64 {
		p, fb, ok := s.profiles.Lookup(model, product)
		if !ok || fb.Used() {
			return 0
		}
		lat, err := scheduler.LatencyAt(p, max(c.Batch, 1), float64(c.SMPercent))
		if err != nil || lat <= 0 {
			return 0
		}
		return float64(max(c.Batch, 1)) * 1000 / lat
	}
}

// modelBytes sizes a replica's model for the cache.
func modelBytes(pl scheduler.Plan) int64 {
	if pl.Request.ModelSizeBytes > 0 {
		return pl.Request.ModelSizeBytes
	}
	return 256 << 20
}

// setInventory follows the cluster's GPUs. A node gone loses its replicas
// (scheduler.Allocator.RemoveNode); any other change (a node added, a GPU
// gone or changed) books every replica again on a fresh allocator, oldest
// function first, and the replicas that no longer fit are lost. Lost
// replicas become pending, so they are placed elsewhere at once or wait.
// It returns the functions whose groups changed.
func (s *state) setInventory(inv gpu.Inventory, now time.Time) map[string]bool {
	dirty := map[string]bool{}
	if sameInventory(s.inv, inv) {
		return dirty
	}
	var lost []string
	keep := nodesOf(inv)
	for n := range nodesOf(s.inv) {
		if !keep[n] {
			lost = append(lost, s.alloc.RemoveNode(n, now)...)
			s.log.Warn("node lost: its replicas are placed elsewhere", zap.String("node", n))
		}
	}
	rest := gpu.Inventory{Source: inv.Source}
	for _, n := range s.inv.Nodes {
		if keep[n.Name] {
			rest.Nodes = append(rest.Nodes, n)
		}
	}
	if !sameInventory(rest, inv) {
		lost = append(lost, s.rebook(inv, now)...)
	}
	s.inv, s.product = inv, inv.MainProduct()
	s.forget(lost, now, dirty)
	return dirty
}

// rebook moves every booking onto a fresh allocator for inv and returns
// those that do not fit any more.
func (s *state) rebook(inv gpu.Inventory, now time.Time) []string {
	held := s.alloc.Placements()
	c := cache.New(cache.DefaultOptions)
	a := scheduler.NewAllocator(inv, c)
	var lost []string
	for _, id := range s.bookingOrder(held) {
		if err := a.Restore(id, held[id]); err != nil {
			lost = append(lost, id)
			continue
		}
		if fn := s.ownerOf(id); fn != nil {
			c.Preload(id, fn.plan.Request.Model, modelBytes(fn.plan), now)
		}
	}
	s.alloc, s.cache = a, c
	return lost
}

// bookingOrder lists bookings draining ones first (their pods run now),
// then by function age.
func (s *state) bookingOrder(held map[string]scheduler.Placement) []string {
	var out []string
	seen := map[string]bool{}
	for _, k := range sortedKeys(s.drains) {
		for _, id := range s.drains[k].ids {
			if _, ok := held[id]; ok && !seen[id] {
				out, seen[id] = append(out, id), true
			}
		}
	}
	for _, fn := range s.sortedFunctions() {
		for _, g := range fn.sortedGroups() {
			for _, id := range g.ids {
				if _, ok := held[id]; ok && !seen[id] {
					out, seen[id] = append(out, id), true
				}
			}
		}
	}
	return out
}

func (s *state) ownerOf(id string) *function {
	for _, fn := range s.functions {
		for _, g := range fn.groups {
			for _, gid := range g.ids {
				if gid == id {
					return fn
				}
			}
		}
	}
	return nil
}

// forget drops lost bookings from groups and drains; a lost replica of a
// function becomes pending again.
func (s *state) forget(lost []string, now time.Time, dirty map[string]bool) {
	if len(lost) == 0 {
		return
	}
	gone := map[string]bool{}
	for _, id := range lost {
		gone[id] = true
		s.cache.RemoveReplica(id, now)
	}
	for k, d := range s.drains {
		kept := d.ids[:0]
		for _, id := range d.ids {
			if !gone[id] {
				kept = append(kept, id)
			}
		}
		d.ids = kept
		if len(d.ids) == 0 {
			delete(s.drains, k)
		}
	}
	for _, fn := range s.functions {
		for name, g := range fn.groups {
			kept := g.ids[:0]
			for _, id := range g.ids {
				if gone[id] {
					fn.pending = append(fn.pending, &pendingReplica{id: newReplicaID(fn.spec.Name()), config: g.config, since: now.UTC()})
					dirty[fn.key()] = true
					continue
				}
				kept = append(kept, id)
			}
			g.ids = kept
			if len(g.ids) == 0 {
				delete(fn.groups, name)
			}
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// groupSpecs are the Deployments function k should have now.
func (s *state) groupSpecs(k string) []groupSpec {
	fn, ok := s.functions[k]
	if !ok {
		return nil
	}
	var out []groupSpec
	for _, g := range fn.sortedGroups() {
		out = append(out, groupSpec{Function: fn.spec, Model: fn.plan.Request.Model, Name: g.name, Placement: g.placement,
			Visible: s.visibleDevices(g.placement), Config: g.config, Replicas: len(g.ids)})
	}
	return out
}

// visibleDevices names a placement's GPUs for NVIDIA_VISIBLE_DEVICES: by
// UUID, except GPUs known only from GPU Feature Discovery's labels, whose
// made-up UUIDs the driver does not know: those by index.
func (s *state) visibleDevices(p scheduler.Placement) []string {
	out := make([]string, len(p.GPUs))
	for i, u := range p.GPUs {
		out[i] = u
		if strings.HasPrefix(u, "GPU-") || strings.HasPrefix(u, "MIG-") {
			continue
		}
		for _, d := range s.inv.Devices() {
			if d.UUID == u {
				out[i] = strconv.Itoa(d.Index)
			}
		}
	}
	return out
}

// reservedGPUs are the GPUs holding any booking, draining ones included:
// each needs its placeholder pod. Value: the GPU's node.
func (s *state) reservedGPUs() map[string]string {
	out := map[string]string{}
	for _, u := range s.alloc.Usage() {
		if len(u.Replicas) > 0 {
			out[u.Device.UUID] = u.Device.Node
		}
	}
	return out
}
