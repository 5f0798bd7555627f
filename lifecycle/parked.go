package lifecycle

import (
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// A parked process is one of a function's processes started ahead of any
// placement: its container is up and its runtime imported, and it holds
// no GPU and no model. A replica placed while one is ready takes it over
// (its Start names it, Effect.Parked): it skips the container start, gets
// its GPU settings from the backend and loads its model. The container
// start is where the simulated workloads' misses above 1 % come from
// (docs/evaluation.md, "The misses left are the container start's"), and a
// parked process costs host memory, not GPU.
//
// A parked process runs on one node and serves only a placement there on
// a GPU it can see (its Sight, which its backend reports with
// ParkedReady). A function parks on the node of its newest placement:
// where its next replica is likeliest to go.
//
// A function asks for them (com.openfaas.gpu.parked, ScalePolicy.Parked),
// and only a backend that can hand its process its GPU settings after its
// start parks it (Options.CanPark). A function that asks for "auto"
// keeps as many as its own starts showed it needs at once
// (scheduler.ParkedNeed over its starts of the last parkedMemory).

// parkedMemory is how long a function's starts count towards its learnt
// parked count: a burst that has not come back in that time stops
// holding processes for it.
const parkedMemory = 15 * time.Minute

// parkedWindowUnseen is the start-up a learnt count assumes until one of
// the function's parked processes has been seen to start: the longest
// container start the simulated workloads draw.
const parkedWindowUnseen = 30 * time.Second

// Sight is which of its node's GPUs a parked process can be handed:
// every one (All), as a local process started with none sees them, or
// only GPUs (by UUID), as a Kubernetes pod whose devices were fixed when
// it was created.
type Sight struct {
	All  bool
	GPUs []string
}

// covers says whether a process with sight s can be handed gpus.
func (s Sight) covers(gpus []string) bool {
	if s.All {
		return true
	}
	for _, u := range gpus {
		if !slices.Contains(s.GPUs, u) {
			return false
		}
	}
	return true
}

// parkedProc is one parked process; asked is when its Park was; sight,
// known once it is ready, what it can be handed.
type parkedProc struct {
	id, node string
	asked    time.Time
	sight    Sight
}

// parkedPool is what a function keeps parked.
type parkedPool struct {
	// starting were asked for (Park) and have not reported in.
	starting []parkedProc
	// ready can be taken, oldest first.
	ready []parkedProc
}

func (p parkedPool) size() int { return len(p.starting) + len(p.ready) }

func (p parkedPool) clone() parkedPool {
	return parkedPool{starting: slices.Clone(p.starting), ready: slices.Clone(p.ready)}
}

func (p parkedPool) all() []parkedProc { return append(slices.Clone(p.starting), p.ready...) }

// without is p less process id; p's slices are not changed, so that a
// saved pool (touchParked) stays as it was.
func (p parkedPool) without(id string) parkedPool {
	return parkedPool{starting: slices.DeleteFunc(slices.Clone(p.starting), byID(id)), ready: slices.DeleteFunc(slices.Clone(p.ready), byID(id))}
}

// unpark ends parked process p of fn, which the caller has taken out of
// its pool.
func (c *Core) unpark(fn *function, p parkedProc, why string, res *Result) {
	delete(c.parkedBy, p.id)
	res.add(Effect{Kind: Unpark, Function: fn.key, Replica: ReplicaView{ID: p.id, Function: fn.key, Placement: &scheduler.Placement{Node: p.node}}, Why: why})
}

// readyGPUs are the GPUs of inv a ready process can be handed
// (scheduler.Hints.Parked); nil for none.
func (p parkedPool) readyGPUs(inv gpu.Inventory) map[string]bool {
	if len(p.ready) == 0 {
		return nil
	}
	gpus := map[string]bool{}
	for _, q := range p.ready {
		if !q.sight.All {
			for _, u := range q.sight.GPUs {
				gpus[u] = true
			}
			continue
		}
		for _, n := range inv.Nodes {
			if n.Name == q.node {
				for _, d := range n.GPUs {
					gpus[d.UUID] = true
				}
			}
		}
	}
	return gpus
}

func byID(id string) func(parkedProc) bool { return func(p parkedProc) bool { return p.id == id } }

// touchParked saves fn's pool, and who owns each process in it, for the
// operation's undo (txn.go): an Abort puts both back as they were here.
func (c *Core) touchParked(fn *function) {
	saved := fn.parked.clone()
	c.onUndo(func() {
		for _, p := range fn.parked.all() {
			delete(c.parkedBy, p.id)
		}
		fn.parked = saved
		for _, p := range saved.all() {
			c.parkedBy[p.id] = fn.key
		}
	})
}

// parkTarget is how many processes fn keeps parked: what its spec asks,
// where the backend can park it, and never more than the replicas it may
// have.
func (c *Core) parkTarget(fn *function) int {
	n := c.parkAsked(fn)
	if n <= 0 {
		return 0
	}
	if m := fn.spec.Scale.Max; m > 0 && n > m {
		n = m
	}
	if fn.spec.Scale.ParkedAuto {
		window := fn.parkWindow
		if window <= 0 {
			window = parkedWindowUnseen
		}
		n = scheduler.ParkedNeed(fn.parkStarts, window, n)
	}
	return n
}

// parkAsked is how many processes fn's spec asks to keep parked (the
// most a learnt count may reach), where the backend can park it; 0
// where it cannot or asks for none.
func (c *Core) parkAsked(fn *function) int {
	n := fn.spec.Scale.Parked
	if fn.spec.Scale.ParkedAuto {
		n = scheduler.ParkedAutoMax
	}
	if n <= 0 || fn.parkRefused != "" || c.opts.CanPark == nil || !c.opts.CanPark(fn.spec) {
		return 0
	}
	return n
}

// recordStart counts a start of fn towards its learnt parked count.
func (c *Core) recordStart(fn *function, now time.Time) {
	if !fn.spec.Scale.ParkedAuto {
		return
	}
	saved := fn.parkStarts
	fn.parkStarts = append(slices.Clone(saved), now)
	c.onUndo(func() { fn.parkStarts = saved })
}

// forgetStarts drops fn's starts older than parkedMemory, and ends the
// parked processes its learnt count no longer keeps: those starting
// first, then the newest ready.
func (c *Core) forgetStarts(fn *function, now time.Time, res *Result) {
	if !fn.spec.Scale.ParkedAuto {
		return
	}
	i := slices.IndexFunc(fn.parkStarts, func(t time.Time) bool { return now.Sub(t) < parkedMemory })
	if i < 0 {
		i = len(fn.parkStarts)
	}
	if i > 0 {
		saved := fn.parkStarts
		fn.parkStarts = slices.Clone(saved[i:])
		c.onUndo(func() { fn.parkStarts = saved })
	}
	extra := fn.parked.size() - c.parkTarget(fn)
	if extra <= 0 {
		return
	}
	c.touchParked(fn)
	for ; extra > 0; extra-- {
		p := fn.parked.all()[fn.parked.size()-1] // the newest ready
		if n := len(fn.parked.starting); n > 0 {
			p = fn.parked.starting[n-1]
		}
		fn.parked = fn.parked.without(p.id)
		c.unpark(fn, p, "its function's starts no longer need it", res)
	}
}

// parkNode is where fn parks: the node of its newest placed replica, else
// the inventory's first; "" when there is none.
func (c *Core) parkNode(fn *function) string {
	for _, rs := range [][]*replica{fn.live, fn.warm} {
		for i := len(rs) - 1; i >= 0; i-- {
			if rs[i].placement != nil {
				return rs[i].placement.Node
			}
		}
	}
	if len(c.inv.Nodes) > 0 {
		return c.inv.Nodes[0].Name
	}
	return ""
}

// refillParked asks for as many parked processes as fn lacks, on node;
// "": where it parks (parkNode), looked up only when it lacks any, as
// Tick asks for every function.
func (c *Core) refillParked(fn *function, node string, now time.Time, res *Result) {
	want := c.parkTarget(fn)
	if fn.parked.size() >= want {
		return
	}
	if node == "" {
		node = c.parkNode(fn)
	}
	if node == "" {
		return
	}
	c.touchParked(fn)
	for fn.parked.size() < want {
		id := c.newID(fn.spec.Name())
		c.parkedBy[id] = fn.key
		fn.parked.starting = append(fn.parked.starting, parkedProc{id: id, node: node, asked: now})
		res.add(Effect{Kind: Park, Function: fn.key, Replica: ReplicaView{ID: id, Function: fn.key, Placement: &scheduler.Placement{Node: node}},
			Why: "parked ahead of a placement"})
	}
}

// handOver is the parked process a replica being started on placement pl
// takes (its Start's Parked; "" for none), and asks for its successor.
// With none ready there, one of fn's parked elsewhere, or one blind to
// pl's GPUs, is parked again where it was placed.
func (c *Core) handOver(fn *function, pl scheduler.Placement, now time.Time, res *Result) string {
	c.recordStart(fn, now)
	id := c.takeParked(fn, pl)
	if id == "" {
		c.followParked(fn, pl, res)
	}
	c.refillParked(fn, pl.Node, now, res)
	return id
}

// takeParked hands the oldest ready parked process of fn that can be
// handed placement pl to the replica being started there; "" when none
// is ready.
func (c *Core) takeParked(fn *function, pl scheduler.Placement) string {
	i := slices.IndexFunc(fn.parked.ready, func(p parkedProc) bool { return p.node == pl.Node && p.sight.covers(pl.GPUs) })
	if i < 0 {
		return ""
	}
	c.touchParked(fn)
	id := fn.parked.ready[i].id
	fn.parked = fn.parked.without(id)
	delete(c.parkedBy, id)
	return id
}

// followParked parks one of fn's processes again when a replica placed on
// pl found none to take: the pool follows the function's placements. The
// process ended is one elsewhere, a starting one first, else a ready one
// on pl's node that cannot see pl's GPUs (its successor, parked now, sees
// what is held there now, pl's GPUs among them).
func (c *Core) followParked(fn *function, pl scheduler.Placement, res *Result) {
	if fn.parked.size() < c.parkTarget(fn) {
		return
	}
	all := fn.parked.all()
	why := "parked on " + pl.Node + " instead, where its function was placed"
	i := slices.IndexFunc(all, func(p parkedProc) bool { return p.node != pl.Node })
	if i < 0 {
		why = "parked again to see the GPUs its function was placed on"
		i = slices.IndexFunc(fn.parked.ready, func(p parkedProc) bool { return !p.sight.covers(pl.GPUs) })
		if i < 0 {
			return
		}
		i += len(fn.parked.starting)
	}
	p := all[i]
	c.touchParked(fn)
	fn.parked = fn.parked.without(p.id)
	c.unpark(fn, p, why, res)
}

// unparkAll ends every process fn has parked: it was deleted, or updated
// (a process started from the old spec cannot serve the new one).
func (c *Core) unparkAll(fn *function, why string, res *Result) {
	if fn.parked.size() == 0 {
		return
	}
	c.touchParked(fn)
	all := fn.parked.all()
	fn.parked = parkedPool{}
	for _, p := range all {
		c.unpark(fn, p, why, res)
	}
}

// ParkedReady records that parked process id has started and waits for a
// placement, one on a GPU in its sight. One the core no longer knows (its
// function deleted or updated, which asked for its Unpark) is ignored.
func (c *Core) ParkedReady(id string, sight Sight, now time.Time) Result {
	c.begin()
	defer c.begin()
	fn := c.functions[c.parkedBy[id]]
	if fn == nil {
		return Result{}
	}
	if i := slices.IndexFunc(fn.parked.starting, byID(id)); i >= 0 {
		p := fn.parked.starting[i]
		p.sight = Sight{All: sight.All, GPUs: slices.Clone(sight.GPUs)}
		fn.parked.starting = slices.Delete(fn.parked.starting, i, i+1)
		fn.parked.ready = append(fn.parked.ready, p)
		fn.parkWindow = now.Sub(p.asked)
	}
	return Result{}
}

// ParkedGone records that parked process id could not be started, or
// exited before it was taken.
// Its successor is asked for at the next Tick, not at once, so that a
// process that cannot start is not restarted as fast as it fails.
func (c *Core) ParkedGone(id string, now time.Time) Result {
	c.begin()
	defer c.begin()
	c.dropParked(id)
	return Result{}
}

// ParkedRefused records that parked process id showed, as why says, that
// its function's server does not speak the replica protocol's /_/gpu: it
// answered there as a replica would, not as a parked process, or exited
// before it waited for its settings. Parking is the default, so
// a server that cannot take its GPU settings after its start must cost no
// more than that one process: the function parks nothing until its spec is
// replaced, and the rest of its parked processes end.
func (c *Core) ParkedRefused(id, why string, now time.Time) Result {
	c.begin()
	defer c.begin()
	fn := c.dropParked(id)
	if fn == nil {
		return Result{}
	}
	var res Result
	fn.parkRefused = why
	if why == "" {
		fn.parkRefused = "its server cannot be parked"
	}
	c.unparkAll(fn, "its function's server does not take GPU settings after its start", &res)
	return res
}

// dropParked forgets parked process id, which the backend has ended or
// lost: out of parkedBy and out of its function's pool. It returns that
// function; nil when the core no longer knows the process or the function.
func (c *Core) dropParked(id string) *function {
	key, ok := c.parkedBy[id]
	if !ok {
		return nil
	}
	delete(c.parkedBy, id)
	fn := c.functions[key]
	if fn != nil {
		fn.parked = fn.parked.without(id)
	}
	return fn
}

// ParkedFunction is the key of the function parked process id was started
// for; "" when the core no longer knows it.
func (c *Core) ParkedFunction(id string) string { return c.parkedBy[id] }

// ParkedRefusal is why function key parks nothing although it asks, or
// parks by default: its server showed it cannot be parked
// (ParkedRefused). "" when it has not.
func (c *Core) ParkedRefusal(key string) string {
	if fn := c.functions[key]; fn != nil {
		return fn.parkRefused
	}
	return ""
}

// ParkedTarget is how many processes function key keeps parked: the count
// it asks, or the one its starts taught it (ScalePolicy.ParkedAuto); 0
// where it asks none or its backend cannot park it.
func (c *Core) ParkedTarget(key string) int {
	fn := c.functions[key]
	if fn == nil {
		return 0
	}
	return c.parkTarget(fn)
}

// Parked reports how many processes function key has parked: started and
// waiting for a placement, and on their way.
func (c *Core) Parked(key string) (ready, starting int) {
	fn := c.functions[key]
	if fn == nil {
		return 0, 0
	}
	return len(fn.parked.ready), len(fn.parked.starting)
}

// ParkedProcess is one of a function's parked processes, for a backend
// that writes them as objects of their own (the Kubernetes backend's
// pods): on Node, Ready once ParkedReady said so.
type ParkedProcess struct {
	ID, Node string
	Ready    bool
}

// ParkedProcesses are the processes function key keeps parked now,
// starting ones first; nil for none.
func (c *Core) ParkedProcesses(key string) []ParkedProcess {
	fn := c.functions[key]
	if fn == nil || fn.parked.size() == 0 {
		return nil
	}
	out := make([]ParkedProcess, 0, fn.parked.size())
	for _, p := range fn.parked.starting {
		out = append(out, ParkedProcess{ID: p.id, Node: p.node})
	}
	for _, p := range fn.parked.ready {
		out = append(out, ParkedProcess{ID: p.id, Node: p.node, Ready: true})
	}
	return out
}
