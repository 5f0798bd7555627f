// Package scheduler makes faas-gpu's decisions: where a replica runs, how
// many replicas a function needs and which replica serves a request. It is
// pure: no clock, network or Kubernetes; state and time come in as
// arguments so the provider and the simulator run the same code.
package scheduler

import (
	"errors"
	"fmt"
	"sync"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// Placement is where one replica runs: the GPUs it was given on one node
// and its slice of each.
type Placement struct {
	Node  string    `json:"node"`
	GPUs  []string  `json:"gpus"`
	Slice gpu.Slice `json:"slice"`
}

// NoFitError says why a replica could not be placed anywhere right now.
type NoFitError struct{ Reason string }

func (e *NoFitError) Error() string { return "no GPU fits: " + e.Reason }

// ErrUnknownReplica is returned when releasing a replica that holds nothing.
var ErrUnknownReplica = errors.New("replica holds no reservation")

type gpuState struct {
	dev      gpu.Device
	smUsed   int
	memUsed  int64
	replicas map[string]gpu.Slice
}

func (g *gpuState) fits(s gpu.Slice) bool {
	return g.smUsed+s.SMPercent <= 100 && g.memUsed+s.MemoryBytes <= g.dev.MemoryBytes
}

func (g *gpuState) empty() bool { return len(g.replicas) == 0 }

// Allocator holds every GPU reservation. Reserve checks and books a slice in
// one step under one lock, so concurrent deploys can never oversubscribe a
// GPU's SM % or memory.
type Allocator struct {
	mu     sync.Mutex
	gpus   []*gpuState // ordered by node, index
	byUUID map[string]*gpuState
	held   map[string]Placement
}

// NewAllocator starts with every GPU of inv free.
func NewAllocator(inv gpu.Inventory) *Allocator {
	a := &Allocator{byUUID: map[string]*gpuState{}, held: map[string]Placement{}}
	for _, d := range inv.Devices() {
		g := &gpuState{dev: d, replicas: map[string]gpu.Slice{}}
		a.gpus = append(a.gpus, g)
		a.byUUID[d.UUID] = g
	}
	return a
}

// Reserve places replica id by best fit: among GPUs with room for the slice,
// the one left fullest (least free SM %, then least free memory), so whole
// GPUs stay free for large slices; ties go to node name, then GPU index.
// A request for whole GPUs takes empty GPUs on the node with the fewest free.
func (a *Allocator) Reserve(id string, req gpu.Request) (Placement, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.held[id]; ok {
		return p, nil
	}
	var p Placement
	var err error
	if req.WholeGPUs > 0 {
		p, err = a.pickWhole(req)
	} else {
		p, err = a.pickSlice(req)
	}
	if err != nil {
		return Placement{}, err
	}
	a.book(id, p)
	return p, nil
}

func (a *Allocator) pickSlice(req gpu.Request) (Placement, error) {
	var best *gpuState
	var bestSM int
	var bestMem int64
	lackSM, lackMem := 0, 0
	for _, g := range a.gpus {
		s := req.SliceOn(g.dev)
		if !g.fits(s) {
			if g.smUsed+s.SMPercent > 100 {
				lackSM++
			} else {
				lackMem++
			}
			continue
		}
		freeSM := 100 - g.smUsed - s.SMPercent
		freeMem := g.dev.MemoryBytes - g.memUsed - s.MemoryBytes
		if best == nil || freeSM < bestSM || (freeSM == bestSM && freeMem < bestMem) {
			best, bestSM, bestMem = g, freeSM, freeMem
		}
	}
	if best == nil {
		return Placement{}, &NoFitError{Reason: fmt.Sprintf("%d GPUs: %d without %d%% SM free, %d without %s memory free",
			len(a.gpus), lackSM, req.SliceOn(gpu.Device{}).SMPercent, lackMem, memWanted(req))}
	}
	return Placement{Node: best.dev.Node, GPUs: []string{best.dev.UUID}, Slice: req.SliceOn(best.dev)}, nil
}

func memWanted(req gpu.Request) string {
	if req.MemoryBytes == 0 {
		return "all its"
	}
	return gpu.FormatBytes(req.MemoryBytes)
}

func (a *Allocator) pickWhole(req gpu.Request) (Placement, error) {
	free := map[string][]*gpuState{}
	var nodes []string
	for _, g := range a.gpus {
		if !g.empty() {
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
		return Placement{}, &NoFitError{Reason: fmt.Sprintf("%d whole GPUs wanted on one node, at most %d free on any node", req.WholeGPUs, most)}
	}
	p := Placement{Node: bestNode}
	for _, g := range free[bestNode][:req.WholeGPUs] {
		p.GPUs = append(p.GPUs, g.dev.UUID)
	}
	p.Slice = req.SliceOn(free[bestNode][0].dev)
	return p, nil
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
		g.replicas[id] = s
	}
	a.held[id] = p
}

// Restore books a known placement again, as after a restart. It fails if a
// GPU is gone or the slice no longer fits, and then books nothing.
func (a *Allocator) Restore(id string, p Placement) error {
	a.mu.Lock()
	defer a.mu.Unlock()
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
		if !g.fits(p.Slice) {
			return fmt.Errorf("replica %s: %d%% SM / %s no longer fits on GPU %s", id, p.Slice.SMPercent, gpu.FormatBytes(p.Slice.MemoryBytes), u)
		}
	}
	a.book(id, p)
	return nil
}

// Release frees what replica id holds.
func (a *Allocator) Release(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, ok := a.held[id]
	if !ok {
		return ErrUnknownReplica
	}
	for _, u := range p.GPUs {
		g := a.byUUID[u]
		s := g.replicas[id]
		g.smUsed -= s.SMPercent
		g.memUsed -= s.MemoryBytes
		delete(g.replicas, id)
	}
	delete(a.held, id)
	return nil
}

// GPUUsage is one GPU's bookings.
type GPUUsage struct {
	Device          gpu.Device `json:"device"`
	SMAllocated     int        `json:"smAllocated"`
	MemoryAllocated int64      `json:"memoryAllocated"`
	// Replicas maps replica ID to its slice of this GPU.
	Replicas map[string]gpu.Slice `json:"replicas"`
}

// Usage is a snapshot of every GPU in inventory order.
func (a *Allocator) Usage() []GPUUsage {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]GPUUsage, 0, len(a.gpus))
	for _, g := range a.gpus {
		r := make(map[string]gpu.Slice, len(g.replicas))
		for id, s := range g.replicas {
			r[id] = s
		}
		out = append(out, GPUUsage{Device: g.dev, SMAllocated: g.smUsed, MemoryAllocated: g.memUsed, Replicas: r})
	}
	return out
}

// Placements lists every booked replica, sorted by ID.
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
