package lifecycle

import (
	"io/fs"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// errNotExist and errExist are fs's, so that handlers map them to 404 and
// 409 as they do for every backend.
var (
	errNotExist = fs.ErrNotExist
	errExist    = fs.ErrExist
)

// Kind is what an effect asks the backend to do.
type Kind string

const (
	// Start launches a booked replica on its placement with its
	// environment; with Warm it starts out of service (a restored warm
	// replica).
	Start Kind = "start"
	// Stop ends a replica and frees what it holds. A replica stopped while
	// booked drains: the backend reports it gone (ReplicaGone) once it
	// can no longer use its GPU, and only then is the booking released.
	// One stopped with its booking gone (lost with its node or GPU, or a
	// warm one evicted) carries the placement it had: where that GPU is
	// still there its process may still run on it, and the backend ends
	// it there without a booking to drain.
	Stop Kind = "stop"
	// Demote takes a replica out of service and keeps it, its model and
	// its memory: a warm replica.
	Demote Kind = "demote"
	// Promote puts a warm replica back in service, with no model load.
	Promote Kind = "promote"
	// Write saves a function's record.
	Write Kind = "write"
	// Remove deletes a function's record.
	Remove Kind = "remove"
	// Park starts a process of the function ahead of any placement: no
	// GPU, no GPU settings, no model (parked.go). The backend reports it
	// with ParkedReady once it waits for them, or ParkedGone. Replica
	// carries only its ID and function.
	Park Kind = "park"
	// Unpark ends a parked process that no replica took.
	Unpark Kind = "unpark"
	// LoadModel asks a replica in service to load Model into GPU memory
	// in its idle time, keeping what it holds and serving meanwhile
	// (docs/replica-protocol.md, "POST /_/models"). The backend reports
	// nothing back: the replica's model list, as the cache sees it, tells
	// whether it did.
	LoadModel Kind = "load"
)

// Effect is one thing for the backend to carry out, in the order given.
type Effect struct {
	Kind     Kind
	Function string // Key(namespace, name)
	// Replica is the replica the effect is about (Start, Stop, Demote,
	// Promote).
	Replica ReplicaView
	// Warm marks a Start of a replica restored warm.
	Warm bool
	// Parked, on a Start, is the parked process (Park) that becomes the
	// replica: the backend gives it the replica's GPU settings instead of
	// starting a process. "": start one.
	Parked string
	// Why says what caused it, for logs: "scaled down", "evicted", …
	Why string
	// Record is the function's record to save (Write).
	Record *Record
	// Model is the model to load (LoadModel), ModelBytes its profiled
	// size.
	Model      string
	ModelBytes int64
}

// Record is what a backend persists of a function so that a restart
// restores the same replicas on the same GPUs.
type Record struct {
	Function  scheduler.Function `json:"function"`
	Replicas  int                `json:"replicas"`
	CreatedAt time.Time          `json:"createdAt"`
	Placed    []PlacedReplica    `json:"placed,omitempty"`
}

// PlacedReplica is a booked replica in a Record.
type PlacedReplica struct {
	ID        string                `json:"id"`
	Placement scheduler.Placement   `json:"placement"`
	Config    scheduler.SliceConfig `json:"config"`
	// Idle marks a warm replica out of service.
	Idle bool `json:"idle,omitempty"`
	// Standby marks an idle one started for its function's next rise
	// (standby.go): restored as one, it yields as one.
	Standby bool `json:"standby,omitempty"`
}

// ReplicaView is a replica as reports and effects show it.
type ReplicaView struct {
	ID       string
	Function string
	Config   scheduler.SliceConfig
	Phase    Phase
	// Placement is nil while pending.
	Placement    *scheduler.Placement
	PendingSince time.Time
	Reason       string
	ReasonCode   scheduler.NoFitCode
}

// Placed is one placement decision, for the scheduler's decision metrics.
type Placed struct {
	Replica string
	Err     error
	Evicted []string
}

// Result is what one operation or observation changed.
type Result struct {
	Effects []Effect
	// Decisions are the placements tried, in order.
	Decisions []Placed
	// Scaled are the autoscaler's decisions applied (Tick).
	Scaled []Scaled
}

func (r *Result) add(e Effect) { r.Effects = append(r.Effects, e) }

func (r *replica) view() ReplicaView {
	v := ReplicaView{ID: r.id, Function: r.fn, Config: r.config, Phase: r.phase, PendingSince: r.pendingSince,
		Reason: r.reason, ReasonCode: r.reasonCode}
	if r.placement != nil {
		p := *r.placement
		v.Placement = &p
	}
	return v
}

func (fn *function) record() *Record {
	rec := &Record{Function: fn.spec, Replicas: fn.desired, CreatedAt: fn.createdAt}
	for _, r := range fn.live {
		// A replacement is recorded once it has taken over: a restart
		// before then forgets the move, and the replica it was to replace
		// comes back alone.
		if r.placement != nil && !r.replacing() {
			rec.Placed = append(rec.Placed, PlacedReplica{ID: r.id, Placement: *r.placement, Config: r.config})
		}
	}
	for _, r := range fn.warm {
		rec.Placed = append(rec.Placed, PlacedReplica{ID: r.id, Placement: *r.placement, Config: r.config, Idle: true, Standby: r.standby})
	}
	return rec
}
