package sim

import (
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// repState is where a replica is in its life.
type repState uint8

const (
	// repPending: wanted, but no GPU has room yet.
	repPending repState = iota
	// repStarting: placed; its container starts and its model loads.
	repStarting
	// repServing: in service: routers send it requests.
	repServing
	// repRetired: out of service; it finishes what it holds.
	repRetired
	// repWarm: faas-gpu's idle warm replica: model in GPU memory, no SM.
	repWarm
	// repGone: stopped, its GPU share freed.
	repGone
)

// fullShare is a whole GPU in the unit replicas' shares are counted in
// (SM % x quota %).
const fullShare = 100 * 100

// replica is one running copy of a function (or, for the LB family, a GPU
// worker that serves every function).
type replica struct {
	id    string
	seq   int // creation order
	fn    int // -1: a worker that serves every function
	model int // the model it loads at start; -1: none
	gpu   *gpuState
	sm    int
	quota int
	batch int
	mem   int64
	// share is the SM x time share of its GPU it holds while in service.
	share int
	state repState
	// started: its container runs and its model is loaded.
	started bool
	// fromParked: it took over a parked process, so its start is
	// Options.ParkedStart, not ContainerStart.
	fromParked bool

	queue   fifo    // handed to it, not started (waiting for its running batch)
	running []int32 // the batch it computes
	busy    bool
	gen     uint64
	// compute is the computing time of the batch whose model is loading.
	compute time.Duration
	// work is the dedicated-GPU time (ns) the running batch still needs,
	// on a time-shared GPU or under contention.
	work float64
	// Under contention (contend.go): the running batch's model, the share
	// of it that is GPU work, its interference penalty, its weight on the
	// GPU (share / fullShare) and its rate (dedicated time per virtual
	// time).
	batchModel            int
	gpuFrac, hostFrac     float64
	penalty, weight, rate float64
	cgen                  uint64

	// stopping: stopped while it still held requests; out of routing, it
	// finishes them and then goes (faas-gpu).
	stopping bool

	cfg       scheduler.SliceConfig // faas-gpu: its slice
	tput, rpr float64               // fast-gshare family: throughput, RPR
}

// outstanding is the replica's in flight as the proxy counts it: requests
// running and handed to it, waiting for its running batch.
func (r *replica) outstanding() int64 { return int64(len(r.running) + r.queue.len()) }

// gpuState is one GPU as the engine accounts for it.
type gpuState struct {
	dev    gpu.Device
	idx    int
	booked int // replicas holding its memory (starting, serving, retired, warm)
	active int // replicas in service
	alloc  int // SM x time share of the replicas in service (fullShare = all)
	busy   int // replicas computing
	ts     timeShare
	node   *nodeState
	// Under contention: the batches computing here, when their work was
	// last charged, and (contendRates) their weights, their GPU load and
	// the stretch of their GPU parts.
	crun                     []*replica
	clast                    time.Duration
	cWeight, cLoad, cStretch float64
}

// fifo is a queue of request numbers.
type fifo struct {
	buf  []int32
	head int
}

func (f *fifo) len() int { return len(f.buf) - f.head }

func (f *fifo) push(n int32) { f.buf = append(f.buf, n) }

// peek is the oldest request; the queue must not be empty.
func (f *fifo) peek() int32 { return f.buf[f.head] }

func (f *fifo) pop() int32 {
	n := f.buf[f.head]
	f.head++
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	} else if f.head >= 1024 && f.head*2 >= len(f.buf) {
		f.buf = f.buf[:copy(f.buf, f.buf[f.head:])]
		f.head = 0
	}
	return n
}

// takeModel pops into dst the oldest request and up to k-1 more of the
// same model (modelOf), the rest keeping their order: a batch computes
// one model. The queue at a replica is short (at most its batch size
// under pull dispatch), so the scan is cheap.
func (f *fifo) takeModel(dst []int32, k int, modelOf func(int32) int32) []int32 {
	if f.len() == 0 || k <= 0 {
		return dst
	}
	m := modelOf(f.buf[f.head])
	keep := f.head
	for i := f.head; i < len(f.buf); i++ {
		n := f.buf[i]
		if k > 0 && modelOf(n) == m {
			dst = append(dst, n)
			k--
			continue
		}
		f.buf[keep] = n
		keep++
	}
	f.buf = f.buf[:keep]
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	}
	return dst
}

// take pops up to k requests into dst.
func (f *fifo) take(dst []int32, k int) []int32 {
	for range min(k, f.len()) {
		dst = append(dst, f.pop())
	}
	return dst
}
