package scheduler

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
)

// Endpoint is a ready replica the proxy can send requests to. InFlight
// lives with the replica, so the count goes away with it.
type Endpoint struct {
	ID       string
	URL      string
	InFlight *atomic.Int64
	// Models is how many models the replica holds: a miss goes to the
	// replica with fewest, so models spread instead of evicting each other.
	Models int
	// Batch and Throughput are the replica's slice (SliceConfig): the
	// proxy hands it a request while it has fewer than Batch in flight,
	// and prefers the replica that would complete one soonest at
	// Throughput (req/s at full batches). 0: no profile, no slice known;
	// the replica is never held back (scheduler.Pull).
	Batch      int
	Throughput float64
}

// Slot is the endpoint as the pull dispatcher sees it now.
func (e Endpoint) Slot() Slot {
	return Slot{InFlight: int(e.InFlight.Load()), Batch: e.Batch, Throughput: e.Throughput, Models: e.Models}
}

// Route is where a function's requests go now: the one lookup the proxy
// makes per request.
type Route struct {
	// Endpoints are the replicas in service that answer now.
	Endpoints []Endpoint
	// SLO is the function's latency target (com.openfaas.gpu.slo); 0:
	// none.
	SLO time.Duration
	// Model is the function's own model, for requests that name none.
	Model string
}

// ClusterReport is the GPU view served at /system/gpus: every GPU with its
// bookings and every replica still waiting for room.
type ClusterReport struct {
	Source    string           `json:"source"`
	Emulated  bool             `json:"emulated"`
	Nodes     []NodeReport     `json:"nodes"`
	Pending   []PendingEntry   `json:"pending"`
	Functions []FunctionReport `json:"functions"`
	Cache     cache.Stats      `json:"cache"`
	Stats     Stats            `json:"stats"`
}

// FunctionReport is one function's slice decision and scaling state.
type FunctionReport struct {
	Name        string  `json:"name"`
	Namespace   string  `json:"namespace"`
	Model       string  `json:"model"`
	SMPercent   int     `json:"smPercent"`
	MemoryBytes int64   `json:"memoryBytes"`
	Batch       int     `json:"batch"`
	SLO         string  `json:"slo,omitempty"`
	Autoscaled  bool    `json:"autoscaled"`
	Decision    string  `json:"decision"`
	Rate        float64 `json:"rate"`
	Replicas    int     `json:"replicas"`
	Ready       int     `json:"ready"`
	Idle        int     `json:"idle"`
	Pending     int     `json:"pending"`
	LastScale   string  `json:"lastScale,omitempty"`
	// Parked are its processes started ahead of its placements, off the
	// GPU, that wait for one (com.openfaas.gpu.parked); absent: none.
	Parked int `json:"parked,omitempty"`
	// ParkedTarget is how many it keeps parked: the count it asks, or
	// the one its starts taught it ("auto"); absent: none.
	ParkedTarget int `json:"parkedTarget,omitempty"`
	// ParkedRefused is why it parks nothing although it asked, or would
	// by default: its server showed it cannot be parked (an answer on
	// /_/gpu, an exit before it waited), until the function is updated.
	ParkedRefused string `json:"parkedRefused,omitempty"`
	// Problem is why the function's replicas cannot start (a build folder
	// with no Dockerfile, an fprocess not in it): the deploy was accepted,
	// as OpenFaaS accepts it, so this is where the user learns of it.
	// Empty when nothing is known to be wrong.
	Problem string `json:"problem,omitempty"`
	// Measured is what the invocation proxy saw of the function over the
	// last minute; absent when it served none of its requests in that time.
	Measured *MeasuredLatency `json:"measured,omitempty"`
}

// MeasuredLatency is the proxy's recent view of one function: requests it
// forwarded, their rate and latency (from the proxy receiving a request to
// the replica's response headers), and how many missed the SLO.
type MeasuredLatency struct {
	// WindowSeconds is the time the numbers cover: the last minute, less
	// when the provider started more recently.
	WindowSeconds float64 `json:"windowSeconds"`
	Requests      int     `json:"requests"`
	Rate          float64 `json:"rate"`
	// P50Ms and P95Ms are interpolated in log-spaced buckets: within 9.1 %
	// of the exact quantile.
	P50Ms  float64 `json:"p50Ms"`
	P95Ms  float64 `json:"p95Ms"`
	MeanMs float64 `json:"meanMs"`
	// SLOMs, SLOViolations and SLOViolationRatio are set only for a
	// function with an SLO. A violation is a request slower than the SLO
	// or one that failed (5xx, or the replica not answering).
	SLOMs             float64  `json:"sloMs,omitempty"`
	SLOViolations     *int     `json:"sloViolations,omitempty"`
	SLOViolationRatio *float64 `json:"sloViolationRatio,omitempty"`
	// Queued is how many of the function's requests wait in the proxy now
	// for a replica that can start them. QueueWaitP50Ms, QueueWaitP95Ms
	// and QueueWaitMeanMs are how long the requests the proxy handed to a
	// replica in the window waited for it (0 for one that started at
	// once), part of the latency above.
	Queued          int     `json:"queued"`
	QueueWaitP50Ms  float64 `json:"queueWaitP50Ms"`
	QueueWaitP95Ms  float64 `json:"queueWaitP95Ms"`
	QueueWaitMeanMs float64 `json:"queueWaitMeanMs"`
}

// NodeReport is one node of the report.
type NodeReport struct {
	Name string      `json:"name"`
	GPUs []GPUReport `json:"gpus"`
}

// GPUReport is one GPU with what is booked on it.
type GPUReport struct {
	UUID            string          `json:"uuid"`
	Index           int             `json:"index"`
	Product         string          `json:"product"`
	MemoryBytes     int64           `json:"memoryBytes"`
	SMCount         int             `json:"smCount"`
	SMAllocated     int             `json:"smAllocated"`
	MemoryAllocated int64           `json:"memoryAllocated"`
	Replicas        []ReplicaReport `json:"replicas"`
}

// ReplicaReport is one replica's slice of one GPU.
type ReplicaReport struct {
	ID          string `json:"id"`
	Function    string `json:"function"`
	Namespace   string `json:"namespace"`
	SMPercent   int    `json:"smPercent"`
	MemoryBytes int64  `json:"memoryBytes"`
	Ready       bool   `json:"ready"`
	Idle        bool   `json:"idle"`
	// Standby marks an idle replica started out of service for its
	// function's next rise, not one scaled down (docs/scheduling.md §3a).
	Standby  bool     `json:"standby,omitempty"`
	Emulated bool     `json:"emulated"`
	Models   []string `json:"models"`
	// ReadyAfterSeconds is how long the replica took from its placement
	// (Kubernetes: its pod's creation) to ready: for a GPU function mostly
	// its model load. Absent until it is ready.
	ReadyAfterSeconds *float64 `json:"readyAfterSeconds,omitempty"`
	// ModelLoadSeconds is how long each model the replica holds took to
	// load, as the replica says (docs/replica-protocol.md); absent when
	// it does not say.
	ModelLoadSeconds map[string]float64 `json:"modelLoadSeconds,omitempty"`
}

// PendingEntry is a replica that fits on no GPU yet.
type PendingEntry struct {
	ID        string `json:"id"`
	Function  string `json:"function"`
	Namespace string `json:"namespace"`
	Reason    string `json:"reason"`
	// ReasonCode is Reason's NoFitCode; absent while no placement was
	// tried (a standby's view).
	ReasonCode NoFitCode `json:"reasonCode,omitempty"`
	Since      time.Time `json:"since"`
}

// NodeReports groups the allocator's GPUs by node for the report, with each
// booked replica's slice and models; describe fills in what only the
// backend knows of a replica (its function, readiness).
func NodeReports(usage []GPUUsage, c *cache.Cache, describe func(id string, rr *ReplicaReport)) []NodeReport {
	nodes := []NodeReport{}
	nodeIdx := map[string]int{}
	for _, u := range usage {
		d := u.Device
		i, ok := nodeIdx[d.Node]
		if !ok {
			i = len(nodes)
			nodeIdx[d.Node] = i
			nodes = append(nodes, NodeReport{Name: d.Node})
		}
		g := GPUReport{UUID: d.UUID, Index: d.Index, Product: d.Product, MemoryBytes: d.MemoryBytes, SMCount: d.SMCount,
			SMAllocated: u.SMAllocated, MemoryAllocated: u.MemoryAllocated, Replicas: []ReplicaReport{}}
		ids := make([]string, 0, len(u.Replicas))
		for id := range u.Replicas {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			bk := u.Replicas[id]
			rr := ReplicaReport{ID: id, SMPercent: bk.Slice.SMPercent, MemoryBytes: bk.Slice.MemoryBytes, Idle: bk.Idle, Standby: bk.Spare, Models: c.Models(id)}
			if rr.Models == nil {
				rr.Models = []string{}
			}
			describe(id, &rr)
			g.Replicas = append(g.Replicas, rr)
		}
		nodes[i].GPUs = append(nodes[i].GPUs, g)
	}
	return nodes
}
