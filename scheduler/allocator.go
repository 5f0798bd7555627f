// Package scheduler makes faas-gpu's decisions: where a replica runs, how
// many replicas a function needs and which replica serves a request. It is
// pure: no clock, network or Kubernetes; state and time come in as
// arguments so the provider and the simulator run the same code.
package scheduler

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
)

// Placement is where one replica runs: the GPUs it was given on one node
// and its slice of each.
type Placement struct {
	Node  string    `json:"node"`
	GPUs  []string  `json:"gpus"`
	Slice gpu.Slice `json:"slice"`
}

// NoFitError says why a replica could not be placed anywhere right now:
// Reason for people, Code for metrics and clients.
type NoFitError struct {
	Code   NoFitCode
	Reason string
}

func (e *NoFitError) Error() string { return "no GPU fits: " + e.Reason }

// NoFitCode is the short, fixed cause of a NoFitError. The set is small and
// closed so that it can label a metric.
type NoFitCode string

const (
	// NoFitSM: every GPU lacks the SM % the slice needs.
	NoFitSM NoFitCode = "sm"
	// NoFitMemory: GPUs with the SM % free lack the memory.
	NoFitMemory NoFitCode = "memory"
	// NoFitSMOrMemory: some GPUs lack the SM %, the others the memory.
	NoFitSMOrMemory NoFitCode = "sm_or_memory"
	// NoFitWholeGPUs: no node has enough empty GPUs for a whole-GPU request.
	NoFitWholeGPUs NoFitCode = "whole_gpus"
	// NoFitNoGPU: the inventory has no GPU at all (no GPU node yet).
	NoFitNoGPU NoFitCode = "no_gpu"
	// NoFitPort: booked, but waiting for a fixed upstream port another
	// replica holds (local mode, where no network namespace can be made).
	NoFitPort NoFitCode = "port"
)

// NoFitCodes are every NoFitCode, for exporters that show each one.
func NoFitCodes() []NoFitCode {
	return []NoFitCode{NoFitSM, NoFitMemory, NoFitSMOrMemory, NoFitWholeGPUs, NoFitNoGPU, NoFitPort}
}

// NoFitCodeOf is err's NoFitCode, "" when err is not a NoFitError.
func NoFitCodeOf(err error) NoFitCode {
	var nf *NoFitError
	if errors.As(err, &nf) {
		return nf.Code
	}
	return ""
}

// ErrUnknownReplica is returned for a replica that holds no reservation.
var ErrUnknownReplica = errors.New("replica holds no reservation")

type booking struct {
	slice gpu.Slice
	// idle: a warm replica out of service keeps its memory (its model stays
	// loaded) but runs no kernels, so it holds no SM share.
	idle bool
	// spare: a standby's (Hints.Spare), idle from its start: its memory is
	// free to every placement, which neither scores it nor avoids it, and
	// it is evicted before any other warm replica.
	spare bool
}

type gpuState struct {
	dev      gpu.Device
	smUsed   int
	memUsed  int64
	idleMem  int64 // memory held by idle warm replicas, which can be evicted
	spareMem int64 // of which standbys'
	replicas map[string]booking
}

func (g *gpuState) fits(s gpu.Slice) bool {
	return g.smUsed+s.SMPercent <= 100 && g.memUsed+s.MemoryBytes <= g.dev.MemoryBytes
}

// fitsBesideSpare: the slice fits once standbys' memory is given back.
func (g *gpuState) fitsBesideSpare(s gpu.Slice) bool {
	return g.smUsed+s.SMPercent <= 100 && g.memUsed-g.spareMem+s.MemoryBytes <= g.dev.MemoryBytes
}

// serving reports whether g holds a booking in service (not idle).
func (g *gpuState) serving() bool {
	for _, b := range g.replicas {
		if !b.idle {
			return true
		}
	}
	return false
}

// spareRoom is the most memory a standby may book on g: what leaves
// warmFreeMemory of it free.
func (g *gpuState) spareRoom() int64 {
	return g.dev.MemoryBytes - g.memUsed - int64(warmFreeMemory*float64(g.dev.MemoryBytes))
}

// SpareRoom is the most memory a standby could book on any GPU
// (Hints.Spare, SM aside): a caller placing many can skip those that
// could fit nowhere without a scan of every GPU each.
func (a *Allocator) SpareRoom() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var most int64
	for _, g := range a.gpus {
		if g.serving() {
			most = max(most, g.spareRoom())
		}
	}
	return most
}

// Serving reports whether GPU uuid holds a replica in service: a standby
// alone on a GPU would keep it in use for nobody.
func (a *Allocator) Serving(uuid string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, ok := a.byUUID[uuid]
	return ok && g.serving()
}

// fitsAfterEviction: the slice fits once every idle warm replica is gone.
func (g *gpuState) fitsAfterEviction(s gpu.Slice) bool {
	return g.smUsed+s.SMPercent <= 100 && g.memUsed-g.idleMem+s.MemoryBytes <= g.dev.MemoryBytes
}

// Allocator holds every GPU reservation. Place checks and books a slice in
// one step under one lock, so concurrent deploys can never oversubscribe a
// GPU's SM % or memory. It keeps the model cache's view of replicas in step
// with its bookings.
type Allocator struct {
	mu     sync.Mutex
	gpus   []*gpuState // ordered by node, index
	byUUID map[string]*gpuState
	held   map[string]Placement
	cache  *cache.Cache
}

// NewAllocator starts with every GPU of inv free. c records which replica
// holds which model; nil gives the allocator a cache of its own.
func NewAllocator(inv gpu.Inventory, c *cache.Cache) *Allocator {
	if c == nil {
		c = cache.New(cache.DefaultOptions)
	}
	a := &Allocator{byUUID: map[string]*gpuState{}, held: map[string]Placement{}, cache: c}
	for _, d := range inv.Devices() {
		g := &gpuState{dev: d, replicas: map[string]booking{}}
		a.gpus = append(a.gpus, g)
		a.byUUID[d.UUID] = g
	}
	return a
}

// Cache is the model cache the allocator keeps in step.
func (a *Allocator) Cache() *cache.Cache { return a.cache }

// Hints steer placement towards model locality and fast GPUs.
type Hints struct {
	// Model is the model the replica loads ("" for none).
	Model string
	// Now dates the node tier's "recently loaded".
	Now time.Time
	// Speed is the profiled throughput of the replica's slice on a GPU
	// product; nil or 0 when unknown.
	Speed func(product string) float64
	// Loading are GPUs (by UUID) where replicas of Model were placed a
	// moment ago and will load it: as local as a GPU that holds it, and
	// their nodes as local as a node that loaded it. A pass that places
	// several replicas at once sees them before they start.
	Loading map[string]bool
	// GPU, when set, is the only GPU (by UUID) the replica may take: a
	// consolidation move's target. Warm replicas there are evicted as
	// anywhere.
	GPU string
	// Occupied limits the replica to GPUs that already hold a booking: a
	// replacement made to save cost (a resize or a merge) that opened an
	// idle GPU would spend what it saves, and hold the GPU until
	// consolidation frees it again; it waits for room instead.
	Occupied bool
	// Spare places a standby (lifecycle's): it books memory only, idle
	// from the start (its SM share is booked when it is promoted, if still
	// free); only on a GPU serving some replica, so it never holds a GPU
	// in use by itself; only where it fits without evicting a warm
	// replica; and only where at least warmFreeMemory of the GPU's memory
	// stays free after it, the share below which a warm replica's
	// lifetime shrinks (WarmLifetime), so it goes only where it could
	// stay. Other placements see its memory as free and evict it first.
	Spare bool
	// Avoid are GPUs (by UUID) not to place on: a standby's, those
	// consolidation is emptying.
	Avoid map[string]bool
	// Parked are GPUs (by UUID) a process the function has parked and
	// ready can be handed (lifecycle's): a replica placed there takes it
	// and skips its container's start. It ranks after the model's locality and after
	// needing no eviction, before best fit: ahead of locality it piled a
	// function's replicas onto one node's GPUs (docs/evaluation.md,
	// "Parked processes: a learnt count").
	Parked map[string]bool
}

// Place books replica id on the best GPU for req. The score, in order:
// the model already in that GPU's memory, else loaded recently on its node,
// else cold; no eviction needed over evicting idle warm replicas; a GPU
// a process the function has parked can be handed (Hints.Parked); best fit
// (the GPU left fullest in SM %, then memory, so whole GPUs stay free for
// large slices); the profiled speed of the GPU's product; then node name and
// GPU index. A slice that fits only once idle warm replicas go evicts them,
// least recently idle first, and returns their IDs: the caller stops them.
func (a *Allocator) Place(id string, req gpu.Request, h Hints) (Placement, []string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.held[id]; ok {
		return p, nil, nil
	}
	if req.WholeGPUs > 0 {
		p, evicted, err := a.pickWhole(req, h)
		if err != nil {
			return Placement{}, nil, err
		}
		a.book(id, p)
		return p, evicted, nil
	}
	g, err := a.pickSlice(req, h)
	if err != nil {
		return Placement{}, nil, err
	}
	s := req.SliceOn(g.dev)
	var evicted []string
	if !g.fits(s) {
		evicted = a.evictLocked(g, s, h.Now)
	}
	p := Placement{Node: g.dev.Node, GPUs: []string{g.dev.UUID}, Slice: s}
	a.book(id, p)
	if h.Spare {
		// Its memory only: no SM until it is promoted.
		g.setIdle(id)
		g.setSpare(id)
		a.cache.SetIdle(id, h.Now)
	}
	return p, evicted, nil
}

type score struct {
	parked   bool
	locality int // 2 on the GPU, 1 on the node, 0 cold
	noEvict  bool
	freeSM   int
	freeMem  int64
	speed    float64
}

func (s score) better(o score) bool {
	if s.locality != o.locality {
		return s.locality > o.locality
	}
	if s.noEvict != o.noEvict {
		return s.noEvict
	}
	if s.parked != o.parked {
		return s.parked
	}
	if s.freeSM != o.freeSM {
		return s.freeSM < o.freeSM
	}
	if s.freeMem != o.freeMem {
		return s.freeMem < o.freeMem
	}
	return s.speed > o.speed
}

func (a *Allocator) locality(h Hints) cache.Locality {
	if h.Model == "" {
		return cache.Locality{}
	}
	loc := a.cache.Where(h.Model, h.Now)
	if len(h.Loading) == 0 {
		return loc
	}
	gpus, nodes := map[string]bool{}, map[string]bool{}
	for u := range loc.GPUs {
		gpus[u] = loc.GPUs[u]
	}
	for n := range loc.Nodes {
		nodes[n] = loc.Nodes[n]
	}
	for u := range h.Loading {
		if g, ok := a.byUUID[u]; ok {
			gpus[u], nodes[g.dev.Node] = true, true
		}
	}
	loc.GPUs, loc.Nodes = gpus, nodes
	return loc
}

func (a *Allocator) pickSlice(req gpu.Request, h Hints) (*gpuState, error) {
	loc := a.locality(h)
	speeds := map[string]float64{}
	var best *gpuState
	var bestScore score
	lackSM, lackMem := 0, 0
	for _, g := range a.gpus {
		if h.GPU != "" && g.dev.UUID != h.GPU || h.Occupied && len(g.replicas) == 0 || h.Avoid[g.dev.UUID] {
			continue
		}
		s := req.SliceOn(g.dev)
		fits := g.fits(s)
		if h.Spare && !(fits && g.serving() && s.MemoryBytes <= g.spareRoom()) {
			continue
		}
		if !fits && !g.fitsAfterEviction(s) {
			if g.smUsed+s.SMPercent > 100 {
				lackSM++
			} else {
				lackMem++
			}
			continue
		}
		// Standbys' memory is free memory to the score: a standby never
		// changes where a replica goes.
		besideSpare := g.fitsBesideSpare(s)
		sc := score{parked: h.Parked[g.dev.UUID], noEvict: besideSpare, freeSM: 100 - g.smUsed - s.SMPercent}
		if besideSpare {
			sc.freeMem = g.dev.MemoryBytes - (g.memUsed - g.spareMem) - s.MemoryBytes
		} else {
			sc.freeMem = g.dev.MemoryBytes - (g.memUsed - g.idleMem) - s.MemoryBytes
		}
		switch {
		case loc.GPUs[g.dev.UUID]:
			sc.locality = 2
		case loc.Nodes[g.dev.Node]:
			sc.locality = 1
		}
		if h.Speed != nil {
			v, ok := speeds[g.dev.Product]
			if !ok {
				v = h.Speed(g.dev.Product)
				speeds[g.dev.Product] = v
			}
			sc.speed = v
		}
		if best == nil || sc.better(bestScore) {
			best, bestScore = g, sc
		}
	}
	if best == nil {
		code := NoFitSMOrMemory
		switch {
		case len(a.gpus) == 0:
			code = NoFitNoGPU
		case lackMem == 0:
			code = NoFitSM
		case lackSM == 0:
			code = NoFitMemory
		}
		return nil, &NoFitError{Code: code, Reason: fmt.Sprintf("%d GPUs: %d without %d%% SM free, %d without %s memory free",
			len(a.gpus), lackSM, req.SliceOn(gpu.Device{}).SMPercent, lackMem, memWanted(req))}
	}
	return best, nil
}

func memWanted(req gpu.Request) string {
	if req.MemoryBytes == 0 {
		return "all its"
	}
	return gpu.FormatBytes(req.MemoryBytes)
}

// evictLocked stops idle warm replicas booked on g, least recently idle
// first (ties by ID), until s fits, and counts each eviction. Every idle
// booking on g is a candidate, not only those the cache lists under g: a
// replica spanning GPUs is listed under its first, and a backend may have
// made the cache forget one. One the cache does not know goes first, as
// it holds no model the cache could route to.
func (a *Allocator) evictLocked(g *gpuState, s gpu.Slice, now time.Time) []string {
	if g.fits(s) {
		return nil
	}
	since := map[string]time.Time{}
	for _, ir := range a.cache.Idle("") {
		since[ir.ID] = ir.Since
	}
	var idle []string
	for id, b := range g.replicas {
		if b.idle {
			idle = append(idle, id)
		}
	}
	sort.Slice(idle, func(i, j int) bool {
		if pi, pj := g.replicas[idle[i]].spare, g.replicas[idle[j]].spare; pi != pj {
			return pi // standbys first
		}
		si, sj := since[idle[i]], since[idle[j]]
		if !si.Equal(sj) {
			return si.Before(sj)
		}
		return idle[i] < idle[j]
	})
	var evicted []string
	for _, id := range idle {
		if g.fits(s) {
			break
		}
		a.releaseLocked(id, now)
		a.cache.CountEviction(false)
		evicted = append(evicted, id)
	}
	return evicted
}

func (a *Allocator) pickWhole(req gpu.Request, h Hints) (Placement, []string, error) {
	free := map[string][]*gpuState{}
	var nodes []string
	for _, g := range a.gpus {
		// A GPU holding only idle warm replicas counts as free: they go.
		if g.smUsed > 0 || g.memUsed > g.idleMem {
			continue
		}
		if _, ok := free[g.dev.Node]; !ok {
			nodes = append(nodes, g.dev.Node)
		}
		free[g.dev.Node] = append(free[g.dev.Node], g)
	}
	bestNode := ""
	for _, n := range nodes {
		if len(free[n]) >= req.WholeGPUs && (bestNode == "" || len(free[n]) < len(free[bestNode])) {
			bestNode = n
		}
	}
	if bestNode == "" {
		most := 0
		for _, n := range nodes {
			most = max(most, len(free[n]))
		}
		code := NoFitWholeGPUs
		if len(a.gpus) == 0 {
			code = NoFitNoGPU
		}
		return Placement{}, nil, &NoFitError{Code: code, Reason: fmt.Sprintf("%d whole GPUs wanted on one node, at most %d free on any node", req.WholeGPUs, most)}
	}
	p := Placement{Node: bestNode}
	var evicted []string
	for _, g := range free[bestNode][:req.WholeGPUs] {
		p.GPUs = append(p.GPUs, g.dev.UUID)
		evicted = append(evicted, a.evictLocked(g, req.SliceOn(g.dev), h.Now)...)
	}
	p.Slice = req.SliceOn(free[bestNode][0].dev)
	return p, evicted, nil
}

func (a *Allocator) book(id string, p Placement) {
	for _, u := range p.GPUs {
		g := a.byUUID[u]
		s := p.Slice
		if s.MemoryBytes > g.dev.MemoryBytes {
			s.MemoryBytes = g.dev.MemoryBytes
		}
		g.smUsed += s.SMPercent
		g.memUsed += s.MemoryBytes
		g.replicas[id] = booking{slice: s}
	}
	a.held[id] = p
	a.cache.AddReplica(id, p.GPUs[0], p.Node, p.Slice.MemoryBytes)
}

// Restore books a known placement again, as after a restart. It fails if a
// GPU is gone or the slice no longer fits, and then books nothing.
func (a *Allocator) Restore(id string, p Placement) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.restorable(id, p, (*gpuState).fits); err != nil {
		return err
	}
	a.book(id, p)
	return nil
}

// RestoreIdle books a known placement again as an idle warm replica's,
// idle since then: its memory, not its SM share, so it needs only memory
// free. Booked in service and demoted after, it would need its SM share
// free for a moment, and a warm replica on a GPU whose SMs others fill
// would not come back although it holds none of them. A standby is
// marked after (MarkSpare).
func (a *Allocator) RestoreIdle(id string, p Placement, since time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.restorable(id, p, (*gpuState).fitsIdle); err != nil {
		return err
	}
	a.book(id, p)
	for _, u := range p.GPUs {
		a.byUUID[u].setIdle(id)
	}
	a.cache.SetIdle(id, since)
	return nil
}

// fitsIdle: an idle warm replica's memory fits (it books no SM share).
func (g *gpuState) fitsIdle(s gpu.Slice) bool {
	return g.memUsed+s.MemoryBytes <= g.dev.MemoryBytes
}

// restorable checks that p can be booked again for id: each of its GPUs
// is known, on p's node, and fits the slice as fits says.
func (a *Allocator) restorable(id string, p Placement, fits func(*gpuState, gpu.Slice) bool) error {
	if _, ok := a.held[id]; ok {
		return fmt.Errorf("replica %s is already placed", id)
	}
	if len(p.GPUs) == 0 {
		return fmt.Errorf("replica %s: placement names no GPU", id)
	}
	for _, u := range p.GPUs {
		g, ok := a.byUUID[u]
		if !ok {
			return fmt.Errorf("replica %s: GPU %s is not in the inventory", id, u)
		}
		if g.dev.Node != p.Node {
			return fmt.Errorf("replica %s: GPU %s is on node %s, not %s", id, u, g.dev.Node, p.Node)
		}
		if !fits(g, p.Slice) {
			return fmt.Errorf("replica %s: %d%% SM / %s no longer fits on GPU %s", id, p.Slice.SMPercent, gpu.FormatBytes(p.Slice.MemoryBytes), u)
		}
	}
	return nil
}

// Release frees what replica id holds; its models move to the node tier.
func (a *Allocator) Release(id string, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.held[id]; !ok {
		return ErrUnknownReplica
	}
	a.releaseLocked(id, now)
	return nil
}

func (a *Allocator) releaseLocked(id string, now time.Time) {
	p := a.held[id]
	for _, u := range p.GPUs {
		g := a.byUUID[u]
		b := g.replicas[id]
		if !b.idle {
			g.smUsed -= b.slice.SMPercent
		} else {
			g.idleMem -= b.slice.MemoryBytes
		}
		if b.spare {
			g.spareMem -= b.slice.MemoryBytes
		}
		g.memUsed -= b.slice.MemoryBytes
		delete(g.replicas, id)
	}
	delete(a.held, id)
	a.cache.RemoveReplica(id, now)
}

// Demote turns replica id into an idle warm replica: out of service, its
// model kept in memory, its SM share free for others.
func (a *Allocator) Demote(id string, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.held[id]
	if !ok {
		return ErrUnknownReplica
	}
	for _, u := range p.GPUs {
		a.byUUID[u].setIdle(id)
	}
	a.cache.SetIdle(id, now)
	return nil
}

// setIdle takes booking id's SM share out of g's, keeping its memory.
func (g *gpuState) setIdle(id string) {
	b := g.replicas[id]
	if b.idle {
		return
	}
	g.smUsed -= b.slice.SMPercent
	g.idleMem += b.slice.MemoryBytes
	b.idle = true
	g.replicas[id] = b
}

// setSpare marks idle booking id a standby's.
func (g *gpuState) setSpare(id string) {
	if b := g.replicas[id]; b.idle && !b.spare {
		b.spare = true
		g.spareMem += b.slice.MemoryBytes
		g.replicas[id] = b
	}
}

// MarkSpare marks idle replica id's booking a standby's, as Hints.Spare
// places one: for one booked again after a restart or an inventory
// change.
func (a *Allocator) MarkSpare(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.held[id]
	if !ok {
		return ErrUnknownReplica
	}
	for _, u := range p.GPUs {
		a.byUUID[u].setSpare(id)
	}
	return nil
}

// Promote puts an idle warm replica back in service, if its SM share is
// still free.
func (a *Allocator) Promote(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.promotable(id); err != nil {
		return err
	}
	p := a.held[id]
	for _, u := range p.GPUs {
		g := a.byUUID[u]
		b := g.replicas[id]
		if !b.idle {
			continue
		}
		g.smUsed += b.slice.SMPercent
		g.idleMem -= b.slice.MemoryBytes
		if b.spare {
			g.spareMem -= b.slice.MemoryBytes
		}
		b.idle, b.spare = false, false
		g.replicas[id] = b
	}
	a.cache.SetActive(id)
	return nil
}

// Promotable reports whether warm replica id could be promoted now: its
// GPUs have its SM share free.
func (a *Allocator) Promotable(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.promotable(id) == nil
}

func (a *Allocator) promotable(id string) error {
	p, ok := a.held[id]
	if !ok {
		return ErrUnknownReplica
	}
	for _, u := range p.GPUs {
		g := a.byUUID[u]
		if b := g.replicas[id]; b.idle && g.smUsed+b.slice.SMPercent > 100 {
			return &NoFitError{Code: NoFitSM, Reason: fmt.Sprintf("GPU %s has %d%% SM free, the warm replica needs %d%%", u, 100-g.smUsed, b.slice.SMPercent)}
		}
	}
	return nil
}

// RemoveNode drops a node that is gone, as when it is lost, and returns the
// replicas that were on it: they need placing elsewhere.
func (a *Allocator) RemoveNode(node string, now time.Time) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var lost []string
	for id, p := range a.held {
		if p.Node == node {
			a.releaseLocked(id, now)
			lost = append(lost, id)
		}
	}
	kept := a.gpus[:0]
	for _, g := range a.gpus {
		if g.dev.Node == node {
			delete(a.byUUID, g.dev.UUID)
			continue
		}
		kept = append(kept, g)
	}
	a.gpus = kept
	sort.Strings(lost) // re-placed in a stable order
	return lost
}

// Booking is one replica's slice of one GPU.
type Booking struct {
	Slice gpu.Slice `json:"slice"`
	Idle  bool      `json:"idle"`
	// Spare marks a standby's booking (Hints.Spare).
	Spare bool `json:"spare,omitempty"`
}

// GPUUsage is one GPU's bookings.
type GPUUsage struct {
	Device          gpu.Device `json:"device"`
	SMAllocated     int        `json:"smAllocated"`
	MemoryAllocated int64      `json:"memoryAllocated"`
	// Replicas maps replica ID to its booking on this GPU.
	Replicas map[string]Booking `json:"replicas"`
}

// Usage is a snapshot of every GPU in inventory order.
func (a *Allocator) Usage() []GPUUsage {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]GPUUsage, 0, len(a.gpus))
	for _, g := range a.gpus {
		r := make(map[string]Booking, len(g.replicas))
		for id, b := range g.replicas {
			r[id] = Booking{Slice: b.slice, Idle: b.idle, Spare: b.spare}
		}
		out = append(out, GPUUsage{Device: g.dev, SMAllocated: g.smUsed, MemoryAllocated: g.memUsed, Replicas: r})
	}
	return out
}

// Memory is GPU uuid's memory booked and its capacity, without a
// snapshot of every GPU; ok is false for a GPU not in the inventory.
// Standbys' memory is not counted: it is free to every placement
// (Hints.Spare), so it makes neither a GPU short of memory for a resize
// nor its warm replicas' lifetimes shorter.
func (a *Allocator) Memory(uuid string) (used, capacity int64, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, ok := a.byUUID[uuid]
	if !ok {
		return 0, 0, false
	}
	return g.memUsed - g.spareMem, g.dev.MemoryBytes, true
}

// Placements lists every booked replica.
func (a *Allocator) Placements() map[string]Placement {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]Placement, len(a.held))
	for id, p := range a.held {
		out[id] = p
	}
	return out
}

// CanEverFit reports whether req could fit on an empty inventory, so a
// request that never can is rejected instead of pending forever.
func CanEverFit(inv gpu.Inventory, req gpu.Request) error {
	if req.WholeGPUs > 0 {
		if n := inv.MaxGPUsPerNode(); req.WholeGPUs > n {
			return &gpu.FieldError{Field: gpu.LimitNvidiaGPU, Reason: fmt.Sprintf("%d GPUs asked, the largest node has %d", req.WholeGPUs, n)}
		}
		return nil
	}
	if req.MemoryBytes > 0 {
		if m := inv.LargestMemory(); req.MemoryBytes > m {
			return &gpu.FieldError{Field: gpu.AnnotationMemory, Reason: fmt.Sprintf("%s is more than the largest GPU has (%s)", gpu.FormatBytes(req.MemoryBytes), gpu.FormatBytes(m))}
		}
	}
	return nil
}
