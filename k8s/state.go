package k8s

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
)

// state is what the provider decided. The function lifecycle (functions,
// replicas, bookings, autoscaling) is the lifecycle core's; what only
// Kubernetes has is kept here: replicas sharing a placement form a group
// (one Deployment), and a group's stopped replicas drain until its pods
// are gone. It is plain memory, no API calls: sync.go makes the cluster
// match it. The leader rebuilds it from the cluster when it takes over
// (restore.go); a standby rebuilds a copy for its reads.
type state struct {
	core *lifecycle.Core
	log  *zap.Logger
	// stats count this instance's decisions and the start-ups it saw while
	// leading; a standby's rebuilt view has none.
	stats *scheduler.StatsRecorder
	// since is when the state was made; started holds the pods whose
	// start-up is counted (podUpdated).
	since   time.Time
	started map[types.UID]bool

	// groupOf is the group (Deployment name) of every booked replica the
	// core holds, in service or draining.
	groupOf map[string]string
	// drains are the replicas stopped whose pods may still run on their
	// GPU: the core holds their bookings until ReplicaGone, which
	// checkDrains calls once their group has settled. Key: namespace/group.
	drains map[string]*drain
	// requests are each function's planned GPU request, for the request
	// path (Route), which must not build the function's view per request.
	requests map[string]gpu.Request
	// reasons are the reasons pending replicas were last logged with.
	reasons map[string]string
	// deploymentExists tells whether a Deployment of that name is still in
	// the cluster (nil: never), so a new group does not take its name.
	deploymentExists func(ns, name string) bool
	// deviceOf: booked GPU -> the device its placeholder was given, where
	// they differ (observeNodes); replicas are told that device.
	deviceOf map[string]string
	// warmPod ties each warm replica to the pod kept for it (its name; ""
	// until the writer has chosen and labelled one): a Deployment's pods
	// are interchangeable, so the tie is what keeps that one pod out of
	// routing, and what is removed when the replica goes. A tie is the
	// confirmation the core waits for to release the replica's SM share
	// (confirmDemotes).
	warmPod map[string]string
	// evictions are pods of warm replicas that went (evicted for their
	// memory, or expired): the writer deletes each as its Deployment
	// shrinks by one. Key: namespace/pod.
	evictions map[string]eviction
	// fed are the models each booking's pod said it holds, as last put
	// into the core's cache (Backend.feedModels).
	fed map[string][]string
	// handOvers are the replicas taking a parked pod (parked.go), by
	// replica ID; parkedSeen the parked processes whose pod was seen, so
	// that one whose pod went is gone for the core.
	handOvers  map[string]*handOver
	parkedSeen map[string]bool
	// parkFailed are the parked processes whose pod could not be created,
	// and why, until the loop tells the core.
	parkFailed map[string]error
	// loads are the model loads the core asked (lifecycle.LoadModel),
	// until the loop sends them to the bookings' pods (Backend.sendLoads).
	loads []lifecycle.Effect
}

// eviction is the pod of a warm replica gone: of function fn, in group.
// gpus are where it ran when it was evicted for its memory, which the
// allocator gave away at once: nothing new starts there until the pod is
// gone (Backend.holdForEvictions). Nil for one that expired: it drains.
type eviction struct {
	fn, group string
	gpus      []string
}

// drain is a group shrinking while pods it no longer counts may still run:
// ids are stopped replicas whose bookings the core holds until the group
// has settled; gpus are where a replica stopped without a booking (lost in
// a rebook, its GPU still there) ran, held outside the core (heldGPUs) for
// as long.
type drain struct {
	fn, ns, group string
	ids           []string
	gpus          []string
}

// coreOptions are the lifecycle settings of the Kubernetes backend: a
// stopped replica's booking is held until its pods are gone. A replica
// taken out of service is kept warm: its pod stays, labelled out of
// routing (LabelWarm), its model in memory; its SM share is held until
// that label is written (confirmDemotes). Resizes and consolidation
// moves are made before the old replica goes: the loop reports each
// booking ready once its paired pod is (reportReady).
// A standby's pod is tied to it while it starts, beyond the pods of its
// group's bookings in service, and labelled out of routing before it is
// ready (syncWarm, spareFor); the loop reports it ready once that pod is
// (reportReady).
func coreOptions(store *profiles.Store, as scheduler.AutoscaleOptions) lifecycle.Options {
	return lifecycle.Options{Profiles: store, Autoscale: as, ConfirmStops: true, ConfirmDemotes: true, NewID: newReplicaID}
}

func newState(inv gpu.Inventory, opts lifecycle.Options, log *zap.Logger) *state {
	if log == nil {
		log = zap.NewNop()
	}
	return &state{
		core: lifecycle.New(inv, nil, opts), log: log,
		stats: scheduler.NewStatsRecorder(), since: time.Now(), started: map[types.UID]bool{},
		groupOf: map[string]string{}, drains: map[string]*drain{}, reasons: map[string]string{},
		requests: map[string]gpu.Request{}, warmPod: map[string]string{}, evictions: map[string]eviction{},
		fed: map[string][]string{}, handOvers: map[string]*handOver{}, parkedSeen: map[string]bool{}, parkFailed: map[string]error{},
	}
}

// group is one Deployment of a function: the replicas that share a
// placement and slice, in service (ids) or warm, each warm one keeping a
// pod of the group.
type group struct {
	name      string
	placement scheduler.Placement
	config    scheduler.SliceConfig
	ids, warm []string
}

// groups are function v's groups, by name.
func (s *state) groups(v lifecycle.FunctionView) []*group {
	by := map[string]*group{}
	add := func(r lifecycle.ReplicaView, warm bool) {
		name := s.groupOf[r.ID]
		if r.Placement == nil || name == "" {
			return
		}
		g := by[name]
		if g == nil {
			g = &group{name: name, placement: *r.Placement, config: r.Config}
			by[name] = g
		}
		if warm {
			g.warm = append(g.warm, r.ID)
		} else {
			g.ids = append(g.ids, r.ID)
		}
	}
	for _, r := range v.Live {
		add(r, false)
	}
	for _, r := range v.Warm {
		add(r, true)
	}
	out := make([]*group, 0, len(by))
	for _, g := range by {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// groupSize is how many pods group name of function k should have: one
// per replica in service or warm.
func (s *state) groupSize(k, name string) int {
	v, ok := s.core.Function(k)
	if !ok {
		return 0
	}
	n := 0
	for _, r := range append(v.Live, v.Warm...) {
		if r.Placement != nil && s.groupOf[r.ID] == name {
			n++
		}
	}
	return n
}

// apply carries out what the core decided, as far as the state goes: a
// Start puts its replica in a group, a Stop of a booked replica drains it
// in its group; placements are counted and logged. It returns the
// functions to write (sync.go writes them with their groups).
func (s *state) apply(res lifecycle.Result, took time.Duration, now time.Time) map[string]bool {
	dirty := map[string]bool{}
	for _, d := range res.Decisions {
		s.stats.Placed(d.Evicted, d.Err, took/time.Duration(len(res.Decisions)))
		if d.Err == nil {
			continue
		}
		if v, ok := s.core.Replica(d.Replica); ok && v.Reason != "" && s.reasons[v.ID] != v.Reason {
			s.reasons[v.ID] = v.Reason
			ns, name := splitKey(v.Function)
			s.log.Info("replica pending", zap.String("function", name), zap.String("namespace", ns), zap.String("replica", v.ID), zap.String("reason", v.Reason))
		}
	}
	for _, e := range res.Effects {
		if e.Kind == lifecycle.LoadModel {
			// A pod's own business: no Deployment changes.
			s.loads = append(s.loads, e)
			continue
		}
		dirty[e.Function] = true
		switch e.Kind {
		case lifecycle.Start:
			if _, known := s.groupOf[e.Replica.ID]; !known && e.Replica.Placement != nil {
				s.groupOf[e.Replica.ID] = s.groupFor(e.Function, *e.Replica.Placement, e.Replica.Config)
			}
			if e.Parked != "" {
				// It takes a parked pod, adopted into its group once
				// handed its settings (parked.go).
				s.handOvers[e.Replica.ID] = &handOver{fn: e.Function, pod: parkedPodName(e.Parked), group: s.groupOf[e.Replica.ID], warm: e.Warm}
			}
			if e.Warm {
				// Started out of service (a standby): out of routing once
				// the writer has tied its pod to it, before that pod is
				// ready (syncWarm).
				if _, ok := s.warmPod[e.Replica.ID]; !ok {
					s.warmPod[e.Replica.ID] = ""
				}
			}
		case lifecycle.Demote:
			// Out of routing once the writer has tied a pod to it.
			if _, ok := s.warmPod[e.Replica.ID]; !ok {
				s.warmPod[e.Replica.ID] = ""
			}
		case lifecycle.Promote:
			// Back in routing: its pod is unlabelled by the writer.
			delete(s.warmPod, e.Replica.ID)
		case lifecycle.Stop:
			if h := s.handOvers[e.Replica.ID]; h != nil && !h.done {
				// Stopped before its hand-over: the pod is not adopted.
				delete(s.handOvers, e.Replica.ID)
			}
			name, ok := s.groupOf[e.Replica.ID]
			if !ok {
				continue
			}
			_, held := s.core.Replica(e.Replica.ID)
			// Stopped without a booking (a warm replica evicted for its
			// memory, one lost in a rebook): the allocator gave its room
			// away, but its pod runs on until the writer has removed it.
			var unbooked []string
			if !held {
				unbooked = s.presentGPUs(e.Replica.Placement)
			}
			if pod, warm := s.warmPod[e.Replica.ID]; warm {
				// A warm replica evicted or expired: its own pod must go,
				// not whichever pod the ReplicaSet controller would pick.
				delete(s.warmPod, e.Replica.ID)
				if pod != "" {
					ns, _ := splitKey(e.Function)
					s.evictions[fnKey(ns, pod)] = eviction{fn: e.Function, group: name, gpus: unbooked}
					unbooked = nil // held while that pod exists
				}
			}
			if !held {
				delete(s.groupOf, e.Replica.ID)
				if len(unbooked) > 0 {
					// Its group drains, its GPUs held, until the pods
					// beyond what the core holds are gone (checkDrains).
					s.holdDrain(e.Function, name, unbooked)
				}
				// Else gone with its node (a pod left there that runs
				// again when it is back is a stray: strays), or its pod
				// tied and held as an eviction.
				continue
			}
			s.addDrain(e.Function, name, e.Replica.ID)
		}
	}
	for _, sc := range res.Scaled {
		ns, name := splitKey(sc.Function)
		s.log.Info("autoscaled", zap.String("function", name), zap.String("namespace", ns),
			zap.Int("added", sc.Added), zap.Int("removed", sc.Removed), zap.Int("replicas", sc.Replicas), zap.Float64("rate", sc.Rate), zap.String("reason", sc.Reason))
	}
	s.forgetGone()
	for k := range dirty {
		s.refreshRequest(k)
	}
	return dirty
}

// refreshRequest takes function k's request from the core.
func (s *state) refreshRequest(k string) {
	if v, ok := s.core.Function(k); ok {
		s.requests[k] = v.Plan.Request
	} else {
		delete(s.requests, k)
	}
}

func (s *state) addDrain(fn, name, id string) {
	d := s.drainOf(fn, name)
	if !slices.Contains(d.ids, id) {
		d.ids = append(d.ids, id)
	}
}

// drainOf is group name's drain, started if there is none.
func (s *state) drainOf(fn, name string) *drain {
	ns, _ := splitKey(fn)
	dk := fnKey(ns, name)
	d := s.drains[dk]
	if d == nil {
		d = &drain{fn: fn, ns: ns, group: name}
		s.drains[dk] = d
	}
	return d
}

// holdDrain drains group name of function fn for a replica stopped
// without a booking whose pod may still run on gpus.
func (s *state) holdDrain(fn, name string, gpus []string) {
	d := s.drainOf(fn, name)
	for _, u := range gpus {
		if !slices.Contains(d.gpus, u) {
			d.gpus = append(d.gpus, u)
		}
	}
}

// presentGPUs are those of p still in the inventory: where a pod placed
// at p may still run. None for a node gone.
func (s *state) presentGPUs(p *scheduler.Placement) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, d := range s.core.Inventory().Devices() {
		if slices.Contains(p.GPUs, d.UUID) {
			out = append(out, d.UUID)
		}
	}
	return out
}

// forgetGone drops what the core no longer holds: a drained replica whose
// booking went with its node, a replica an undone operation made, and from
// the drains a replica an undone operation put back in service.
func (s *state) forgetGone() {
	for id := range s.groupOf {
		if _, ok := s.core.Replica(id); !ok {
			delete(s.groupOf, id)
		}
	}
	for id := range s.warmPod {
		// A standby is warm from its start, Starting until its pod is
		// ready.
		if v, ok := s.core.Replica(id); !ok || v.Phase != lifecycle.Warm && v.Phase != lifecycle.Starting {
			delete(s.warmPod, id)
		}
	}
	for id := range s.fed {
		if _, ok := s.core.Replica(id); !ok {
			delete(s.fed, id)
		}
	}
	for id := range s.handOvers {
		if _, ok := s.core.Replica(id); !ok {
			delete(s.handOvers, id)
		}
	}
	for id := range s.reasons {
		if v, ok := s.core.Replica(id); !ok || v.Placement != nil {
			delete(s.reasons, id)
		}
	}
	for k, d := range s.drains {
		kept := d.ids[:0]
		for _, id := range d.ids {
			if v, ok := s.core.Replica(id); ok && v.Phase == lifecycle.Draining {
				kept = append(kept, id)
			}
		}
		d.ids = kept
		if len(d.ids) == 0 && len(d.gpus) == 0 {
			delete(s.drains, k)
		}
	}
}

// groupFor names the group a replica of function k placed at p with slice
// c joins: the function's group already there, else a new one.
func (s *state) groupFor(k string, p scheduler.Placement, c scheduler.SliceConfig) string {
	ns, name := splitKey(k)
	want := groupName(name, p, c)
	if v, ok := s.core.Function(k); ok {
		for _, r := range append(v.Live, v.Warm...) {
			if g := s.groupOf[r.ID]; g != "" && r.Placement != nil && groupName(name, *r.Placement, r.Config) == want {
				return g
			}
		}
	}
	return s.freeGroupName(ns, name, p, c)
}

// freeGroupName names a new group: by its placement, unless a Deployment
// of that name still drains or is being deleted; a new one of the same
// name would then wait for it, and their pods would count together.
func (s *state) freeGroupName(ns, fnName string, p scheduler.Placement, c scheduler.SliceConfig) string {
	name := groupName(fnName, p, c)
	for i := 2; s.nameBusy(ns, name); i++ {
		name = groupNameN(fnName, p, c, i)
	}
	return name
}

func (s *state) nameBusy(ns, name string) bool {
	if _, ok := s.drains[fnKey(ns, name)]; ok {
		return true
	}
	return s.deploymentExists != nil && s.deploymentExists(ns, name)
}

// checkDrains ends the drains of groups that are down to their size:
// settled says whether no more than size pods of the group may still run
// (terminating ones included) or be created. Each drained replica is gone
// for the core, which frees its booking and places what waited for it. It
// returns the drains it ended and the functions to write, which include
// those with a warm replica not tied to a pod yet (demoted before its pod
// was created): the loop runs this often, so the pod is kept out of
// routing soon after it appears rather than at the next resync.
func (s *state) checkDrains(settled func(ns, group string, size int) bool, now time.Time) ([]*drain, map[string]bool) {
	var ended []*drain
	dirty := map[string]bool{}
	for id, pod := range s.warmPod {
		if v, ok := s.core.Replica(id); ok && pod == "" {
			dirty[v.Function] = true
		}
	}
	// Evicted pods are deleted, and what waits for their GPUs written,
	// until they are gone.
	for _, e := range s.evictions {
		dirty[e.fn] = true
	}
	if held := s.heldGPUs(nil); len(held) > 0 {
		for _, u := range s.core.Usage() {
			if held[u.Device.UUID] == nil {
				continue
			}
			for id := range u.Replicas {
				if v, ok := s.core.Replica(id); ok {
					dirty[v.Function] = true
				}
			}
		}
	}
	for _, k := range sortedKeys(s.drains) {
		d := s.drains[k]
		if d == nil || !settled(d.ns, d.group, s.groupSize(d.fn, d.group)) {
			continue
		}
		delete(s.drains, k)
		ended = append(ended, d)
		for _, id := range d.ids {
			delete(s.groupOf, id)
			began := time.Now() // not now: a test may pass a made-up time
			res := s.core.ReplicaGone(id, now)
			for f := range s.apply(res, time.Since(began), now) {
				dirty[f] = true
			}
		}
	}
	return ended, dirty
}

// confirmDemotes tells the core which warm replicas are out of routing:
// those tied to a pod the writer has labelled (syncWarm). The core then
// releases their SM shares and places what waited for them; it returns
// the functions to write. Run by the loop, which holds Backend.txMu, so
// no open change's undo is cut short.
func (s *state) confirmDemotes(now time.Time) map[string]bool {
	dirty := map[string]bool{}
	for _, id := range sortedKeys(s.warmPod) {
		if s.warmPod[id] == "" {
			continue
		}
		began := time.Now() // not now: a test may pass a made-up time
		res := s.core.ReplicaDemoted(id, now)
		if len(res.Effects) == 0 && len(res.Decisions) == 0 {
			continue // confirmed already, or nothing waited for its share
		}
		for f := range s.apply(res, time.Since(began), now) {
			dirty[f] = true
		}
	}
	return dirty
}

// liveOrder is the order in which a group's bookings in service are
// paired with its pods (pairPods, whose pods come ready ones first): the
// bookings the core holds ready first, then the starting ones, each by
// ID. A Deployment's pods are interchangeable, so this is what makes a
// booking's pod "its" pod: a starting booking is paired with a ready pod
// only when the group has more ready pods than ready bookings, never
// with the pod of a booking that served already (a replacement that
// joins a group where another replica serves is not ready on that one's
// pod), and a ready booking whose pairing moves to another ready pod
// stays ready.
func (s *state) liveOrder(ids []string) []string {
	out := append([]string(nil), ids...)
	starting := func(id string) bool {
		v, ok := s.core.Replica(id)
		return ok && v.Phase == lifecycle.Starting
	}
	sort.SliceStable(out, func(i, j int) bool {
		if si, sj := starting(out[i]), starting(out[j]); si != sj {
			return sj
		}
		return out[i] < out[j]
	})
	return out
}

// reportReady tells the core which starting replicas answer: those of a
// group whose paired pod is ready (serving: the IDs of group g of a
// function of namespace ns with a ready pod, from pairPods, a standby's
// pod the one tied to it). Each is told
// once: the core holds it ready from then on, and liveOrder keeps it
// paired first. A replica that replaces others retires them now
// (lifecycle.Core.ReplicaReady), so the old ones leave routing only once
// the new pod serves. It returns the functions to write. Run by the loop,
// which holds Backend.txMu, as confirmDemotes.
func (s *state) reportReady(serving func(ns string, g *group) []string, now time.Time) map[string]bool {
	dirty := map[string]bool{}
	starting := func(r lifecycle.ReplicaView) bool { return r.Phase == lifecycle.Starting }
	for _, v := range s.core.Functions() {
		if !slices.ContainsFunc(v.Live, starting) && !slices.ContainsFunc(v.Warm, starting) {
			continue // nothing to tell: no need to look at its pods
		}
		// One at a time, the groups built afresh after each: a replacement
		// ready retires replicas of other groups.
		for s.reportOneReady(v.Key, serving, now, dirty) {
		}
	}
	return dirty
}

// reportOneReady tells the core of one starting replica of function k
// whose pod serves, if there is one, and reports whether there was.
func (s *state) reportOneReady(k string, serving func(ns string, g *group) []string, now time.Time, dirty map[string]bool) bool {
	v, ok := s.core.Function(k)
	if !ok {
		return false
	}
	for _, g := range s.groups(v) {
		for _, id := range serving(v.Spec.Namespace(), g) {
			if r, ok := s.core.Replica(id); !ok || r.Phase != lifecycle.Starting {
				continue
			}
			began := time.Now() // not now: a test may pass a made-up time
			res := s.core.ReplicaReady(id, now)
			dirty[k] = true
			for _, e := range res.Effects {
				if e.Kind == lifecycle.Demote || e.Kind == lifecycle.Stop {
					ns, name := splitKey(e.Function)
					s.log.Info("replacement ready: the replica it replaces leaves", zap.String("function", name), zap.String("namespace", ns),
						zap.String("replica", e.Replica.ID), zap.String("replacement", id), zap.String("why", e.Why))
				}
			}
			for f := range s.apply(res, time.Since(began), now) {
				dirty[f] = true
			}
			return true
		}
	}
	return false
}

// heldGPUs are the GPUs where nothing new may start yet: those of an
// evicted warm pod that still exists (podExists; nil: any recorded), whose
// memory the allocator gave away at once, and those of a drain for a
// replica lost without its booking (holdDrain), until the drain ends.
// Value: "" (each holds every group on the GPU, its own included: pods
// it no longer counts may still run there). A warm replica whose pod is not labelled yet
// needs no hold here: the core keeps its SM share booked until then
// (lifecycle.Options.ConfirmDemotes).
func (s *state) heldGPUs(podExists func(ns, pod string) bool) map[string]map[string]bool {
	held := map[string]map[string]bool{}
	hold := func(u, by string) {
		if held[u] == nil {
			held[u] = map[string]bool{}
		}
		held[u][by] = true
	}
	for key, e := range s.evictions {
		if ns, pod := splitKey(key); podExists != nil && !podExists(ns, pod) {
			continue
		}
		for _, u := range e.gpus {
			hold(u, "")
		}
	}
	for _, d := range s.drains {
		for _, u := range d.gpus {
			hold(u, "")
		}
	}
	return held
}

// setInventory follows the cluster's GPUs
// (lifecycle.Core.SetInventoryHolding): replicas lost with a node or GPU
// are placed again, after strays, pods running without a booking, are
// booked as draining.
func (s *state) setInventory(inv gpu.Inventory, strays []strayPod, now time.Time) map[string]bool {
	held := make([]lifecycle.Held, len(strays))
	for i, sp := range strays {
		held[i] = sp.held
	}
	began := time.Now()
	res, booked := s.core.SetInventoryHolding(inv, held, now)
	took := time.Since(began)
	for _, e := range res.Effects {
		if e.Kind == lifecycle.Stop {
			s.log.Warn("replica lost with its node or GPU: placed again", zap.String("function", e.Function), zap.String("replica", e.Replica.ID), zap.String("why", e.Why))
		}
	}
	ok := map[string]bool{}
	for _, id := range booked {
		ok[id] = true
	}
	for _, sp := range strays {
		if !ok[sp.held.ID] {
			continue
		}
		s.log.Info("a pod without a GPU booking (a lost node back): booked until it stops", zap.String("group", fnKey(sp.ns, sp.group)), zap.String("replica", sp.held.ID))
		s.groupOf[sp.held.ID] = sp.group
		s.drains[fnKey(sp.ns, sp.group)] = appendDrain(s.drains[fnKey(sp.ns, sp.group)], sp.held.Function, sp.ns, sp.group, sp.held.ID)
	}
	return s.apply(res, took, now)
}

// tick feeds each function's load to the core and runs one pass of it
// (lifecycle.Core.Tick: autoscaling, placement of what waits; with rise,
// lifecycle.Core.Rise: replicas for a rise only). It returns the
// functions to write.
func (s *state) tick(now time.Time, load func(k string) lifecycle.Load, rise bool) map[string]bool {
	for _, v := range s.core.Functions() {
		s.core.ObserveLoad(v.Key, load(v.Key))
	}
	pass := s.core.Tick
	if rise {
		pass = s.core.Rise
	}
	began := time.Now()
	res := pass(now)
	return s.apply(res, time.Since(began), now)
}

// groupSpecs are the Deployments function k should have now.
func (s *state) groupSpecs(k string) []groupSpec {
	v, ok := s.core.Function(k)
	if !ok {
		return nil
	}
	var out []groupSpec
	for _, g := range s.groups(v) {
		out = append(out, groupSpec{Function: v.Spec, Model: v.Plan.Request.Model, Name: g.name, Placement: g.placement,
			Visible: s.visibleDevices(g.placement), Config: g.config, Replicas: len(g.ids) + len(g.warm)})
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
		if d, ok := s.deviceOf[u]; ok {
			out[i] = d
			continue
		}
		if strings.HasPrefix(u, "GPU-") || strings.HasPrefix(u, "MIG-") {
			continue
		}
		for _, d := range s.core.Inventory().Devices() {
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
	for _, u := range s.core.Usage() {
		if len(u.Replicas) > 0 {
			out[u.Device.UUID] = u.Device.Node
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
