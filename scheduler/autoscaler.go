package scheduler

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// SliceConfig is one way to run a replica: its SM share and batch size,
// and what the profile says one replica sustains there.
type SliceConfig struct {
	SMPercent  int     `json:"smPercent"`
	Batch      int     `json:"batch"`
	Throughput float64 `json:"throughput"` // req/s of one replica
	// SlowestMs is the slowest measured batch of at most Batch at this SM
	// %, in ms: a partial batch is not always faster than a full one
	// (mobilenet_v3_large at 20 % SM: batch 1 in 14.5 ms, batch 8 in
	// 10.2 ms), and the queueing model times a running and an own batch by
	// it. 0: Batch / Throughput.
	SlowestMs float64 `json:"slowestMs,omitempty"`
	// Steps is the measured latency of each batch size up to Batch at
	// this SM % (ConfigsWithin): at low load most batches are partial
	// and far faster than the full one, which the lone-replica model
	// counts (loneCapacity). Zero: unknown, valued as before it.
	Steps BatchSteps `json:"steps,omitzero"`
	// Lone caches that model's capacity at the menu's SLO.
	Lone LoneRate `json:"lone,omitzero"`
}

// Efficiency is throughput per SM %, FaST-GShare's RPR at full quota.
func (c SliceConfig) Efficiency() float64 { return c.Throughput / float64(c.SMPercent) }

// ReplicaCapacity is a live (placed or pending) replica of the function.
type ReplicaCapacity struct {
	ID     string
	Config SliceConfig
	// Unsized: given its slice before the function's load was known (a
	// deploy, a scale by hand or from zero: SmallestSlice). A scale-up
	// may replace it right-sized (RestartWithin).
	Unsized bool
	// Starting: it has not served yet (pending, or placed and not ready),
	// for StartedFor since its placement (0 while pending).
	Starting   bool
	StartedFor time.Duration
}

// RestartWithin bounds how much of its start an unsized replica that has
// not served yet loses where a scale-up replaces it: one placed within it
// is stopped at once and its successor takes its room, a few seconds of a
// cold start's 3-30 lost; one placed longer ago is left to finish. A
// ready one is replaced make-before-break and loses nothing. Either way
// the function holds one right-sized pool instead of its first small
// replicas plus the adds beside them: those hold a replica's memory and
// start-up each for one replica's load until a resize merges them, 30 s
// and more, and where the GPUs in use are short of memory the adds open
// another GPU that consolidation can only empty once the merges are done.
const RestartWithin = 5 * time.Second

// AutoscaleInput is everything one decision reads: no clock, no state.
type AutoscaleInput struct {
	Now time.Time
	// Rate is the observed request rate (req/s), smoothed.
	Rate        float64
	LastRequest time.Time
	Policy      ScalePolicy
	// Replicas are the live replicas, oldest in service first.
	Replicas []ReplicaCapacity
	// Configs are the slices whose profiled latency meets the SLO.
	Configs       []SliceConfig
	LastScaleUp   time.Time
	LastScaleDown time.Time
	// Backlog is how many requests wait beyond what the replicas serve at
	// once: in flight at a replica above its batch size, or queued before
	// reaching one. The rate alone never clears a queue that built while
	// replicas started; the backlog adds what drains it within DrainTime.
	// 0 (a caller that does not measure it): the rate alone decides.
	Backlog float64
	// SLO is the function's latency target. With one, a replica's
	// capacity is what it serves at the SLO's quantile (QueueCapacity:
	// partial batches and waiting), and no headroom is added: the model
	// is the margin. 0: the profiled full-batch throughput x Headroom.
	SLO time.Duration
	// Rising is the rate a rise within the last tick points at
	// (RateEstimator.Rising): scale-ups plan for the larger of it and
	// Rate, so a step is answered at the first tick rather than as the
	// smoothed rate follows it. 0: Rate alone.
	Rising float64
	// MemoryPercent is a replica's GPU memory in % of a GPU's. A replica
	// costs the larger of its SM % and this: a GPU full of small slices'
	// memory is as used as one full of their SM, so efficiency is capacity
	// per that cost. 0: SM % alone.
	MemoryPercent float64
	// Warm are the function's warm replicas (scaled down, model kept),
	// most recently idled last: a scale-up for a rise (Rising above Rate)
	// brings them back before it adds new ones, whatever their slice,
	// since they serve at once while a new replica serves only after its
	// start and its model load — the seconds a burst's first requests
	// miss in. Resizing later trades them for right-sized ones. A
	// scale-up for a slow climb or a backlog alone has time to start
	// right-sized replicas and brings back only a warm one of the slice
	// it chose (the backend's exact match).
	Warm []ReplicaCapacity
	// RiseConfirmed: the interval before the one Rising was read on was
	// a rise too (RateEstimator.RiseConfirmed). A scale-up that only an
	// unconfirmed rise calls for is Tentative (Decision).
	RiseConfirmed bool
	// RateError is the standard error of Rate (RateEstimator.Error): a
	// scale-down leaves replicas that serve the demand plus it, so that
	// the estimate's own wandering does not remove a replica that the
	// next upward wander adds back (with scale-ups at capacity < demand
	// and scale-downs at capacity = demand, a function whose load sits
	// near a replica's edge flapped every cool-down, and where the GPUs
	// in use were full, each flap opened another). Not for a Bursty
	// function: its spare replicas go to warm ones, the next burst's
	// capacity, and holding them in service only trades those for
	// resizes, whose replaced replicas are stopped.
	RateError float64
	// Bursty: the function's rate now is well below its recent peak
	// (RateHistory.Bursty).
	Bursty bool
	// Parked is how many of the function's parked processes are ready
	// to be handed a replica: that many adds serve after a second and
	// their model's load, the rest after a container start (3-30 s in
	// the simulated workloads, more for a large image).
	Parked int
	// CacheFloor is the fewest replicas in service whose memory holds the
	// models a multi-model function's requests name (CacheFloor): a
	// scale-down leaves at least that many. 0: none.
	CacheFloor int
	// FlapFloor is the fewest replicas a scale-down leaves while a
	// harmful flap holds the pool (FlapGuard.Floor). 0: none.
	FlapFloor int
}

// AutoscaleOptions tune the autoscaler.
type AutoscaleOptions struct {
	// Headroom multiplies the observed rate: capacity aims at rate x headroom.
	Headroom float64
	// CoolDown is the quiet time after any scaling before a scale-down.
	CoolDown time.Duration
	// DrainTime is how soon a backlog should be gone: it adds
	// Backlog / DrainTime to the demand. 0 takes DefaultDrainTime.
	DrainTime time.Duration
	// SLOQuantile is the share of requests held to the SLO; 0 takes
	// DefaultSLOQuantile (p99).
	SLOQuantile float64
	// NoQueueing plans a function with an SLO against each replica's
	// full-batch throughput with Headroom, as before issue 12, instead of
	// its capacity from the queueing model (QueueCapacity) ranked by
	// capacity per cost, and turns resizing off (lifecycle.Core gives the
	// input its SLO and memory share only without it). An opt-out, for
	// comparison: docs/evaluation.md, "The held-out suite".
	NoQueueing bool
}

// DefaultDrainTime drains a backlog in 5 s: about one cold start (3-5 s),
// so that replicas added for a queue that built while others started clear
// it about as fast as they arrive, while a momentary queue of a batch or
// two adds well under 1 % to the demand (a batch's latency over 5 s).
const DefaultDrainTime = 5 * time.Second

// DefaultAutoscaleOptions aim at 20 % spare capacity, FaST-GShare's
// hysteresis, wait 30 s before removing replicas and drain a backlog in
// DefaultDrainTime.
var DefaultAutoscaleOptions = AutoscaleOptions{Headroom: 1.2, CoolDown: 30 * time.Second, DrainTime: DefaultDrainTime}

// Decision is what to change: warm replicas to bring back, replicas to
// add (by slice) and to remove.
type Decision struct {
	Promote []string
	Add     []SliceConfig
	Remove  []string
	// Replace are unsized replicas that Add replaces (RestartWithin):
	// stopped at once where they have not served yet, otherwise retired
	// once the first of Add is ready (make-before-break).
	Replace []string
	Reason  string
	// Tentative marks adds that only a rise seen on one interval calls
	// for (the smoothed rate and the backlog are served): the backend
	// adds them only where a GPU already in use has room. A steady rate
	// passes the rise test once in about 740 intervals, and with a few
	// functions and a 250-ms Rise pass that is a false rise every minute
	// or so; opening a GPU for one holds it for a minute or more (the
	// cool-downs, the warm lifetime, consolidation's hold). A rise that
	// lasts shows on the next interval too, and the next decision is
	// firm: a step waits one interval longer for a new GPU, never for
	// room on the GPUs in use.
	Tentative bool
}

// Empty reports a decision that changes nothing.
func (d Decision) Empty() bool {
	return len(d.Promote) == 0 && len(d.Add) == 0 && len(d.Remove) == 0 && len(d.Replace) == 0
}

// Autoscale decides, for one function, replicas to add or remove so its
// profiled capacity covers the demand, rate x headroom + backlog /
// drain time (FaST-GShare's heuristic, slide 12, plus the queue it does
// not look at): the gap is filled with the most efficient slice that meets
// the SLO and the remainder with the smallest slice covering it; surplus
// goes least efficient first, after a cool-down, and never while the
// remaining capacity would not cover the demand (a backlog included); an
// idle function with com.openfaas.scale.zero goes to zero after its
// zero-duration. The result always respects the scale min and max.
func Autoscale(in AutoscaleInput, opts AutoscaleOptions) Decision {
	if opts.Headroom < 1 {
		opts.Headroom = 1
	}
	if opts.DrainTime <= 0 {
		opts.DrainTime = DefaultDrainTime
	}
	n := len(in.Replicas)
	if in.Policy.Zero && n > 0 && !in.LastRequest.IsZero() && in.Now.Sub(in.LastRequest) >= in.Policy.ZeroDuration && in.Rate < 1e-3 && in.Backlog <= 0 {
		d := Decision{Reason: fmt.Sprintf("idle for %s: scale to zero", in.Now.Sub(in.LastRequest).Round(time.Second))}
		for _, r := range in.Replicas {
			d.Remove = append(d.Remove, r.ID)
		}
		return d
	}
	sz := newSizer(in.SLO, opts.SLOQuantile, in.MemoryPercent)
	capOf, cost := sz.capOf, sz.cost
	if in.SLO > 0 {
		opts.Headroom = 1
	}
	menu := sz.menu(in.Configs)
	if len(menu) == 0 {
		return Decision{}
	}
	best := mostEfficient(menu, capOf, cost)
	floor := max(in.Policy.Min, 1)
	backlog := max(in.Backlog, 0)
	if n == 0 && in.Rate < 1e-3 && backlog == 0 {
		return Decision{} // scaled to zero and nothing asks for it
	}
	live := make([]SliceConfig, len(in.Replicas))
	for i, r := range in.Replicas {
		live[i] = r.Config
	}
	// The pool's capacity is only told in a decision's reason: found by
	// bisection, it is worked out only for a decision that changes
	// something.
	drain := backlog / opts.DrainTime.Seconds()
	rate := max(in.Rate, in.Rising)
	demand := rate*opts.Headroom + drain
	switch {
	case !sz.serves(live, demand) || n < floor:
		d := Decision{}
		room := in.Policy.Max - n
		var warm []ReplicaCapacity
		if in.Rising > in.Rate {
			warm = byEfficiency(in.Warm, capOf, cost)
		}
		for _, w := range warm {
			if room <= 0 || n+len(d.Promote) >= floor && sz.serves(live, demand) {
				break
			}
			if capOf(w.Config) > 0 {
				live = append(live, w.Config)
				d.Promote = append(d.Promote, w.ID)
				room--
			}
		}
		d.Add = fill(menu, live, demand, room, best, sz)
		room -= len(d.Add)
		toFloor := func() {
			for n+len(d.Promote)+len(d.Add) < floor && room > 0 {
				d.Add = append(d.Add, smallestCovering(menu, 0, best, capOf, cost))
				room--
			}
		}
		toFloor()
		if len(d.Add) > 0 && n >= floor {
			d.Tentative = sz.serves(live[:n], firmRate(in)*opts.Headroom+drain)
			if !d.Tentative {
				d.Replace, d.Add = replaceUnsized(in.Replicas, live, d.Add, demand, room+len(d.Add), floor, menu, best, sz)
			}
		}
		parked := 0
		if len(d.Replace) == 0 && in.Parked > 0 && len(d.Add) > in.Parked {
			room += len(d.Add)
			d.Add = parkedFirst(menu, live, demand, room, in.Parked, best, sz)
			room -= len(d.Add)
			parked = min(in.Parked, len(d.Add))
			toFloor() // fewer, larger adds may leave the pool below its minimum
		}
		if len(d.Promote)+len(d.Add) > 0 {
			d.Reason = fmt.Sprintf("rate %.1f req/s x %.2f headroom", rate, opts.Headroom)
			if in.SLO > 0 {
				d.Reason = fmt.Sprintf("rate %.1f req/s", rate)
			}
			if backlog > 0 {
				d.Reason += fmt.Sprintf(" + backlog %.0f / %s", backlog, opts.DrainTime)
			}
			d.Reason += fmt.Sprintf(" > capacity %.1f req/s", sz.poolCapacity(live[:n]))
			if len(d.Promote) > 0 {
				d.Reason += fmt.Sprintf(": %d warm back", len(d.Promote))
			}
			if d.Tentative {
				d.Reason += " (tentative: a rise seen once, on GPUs in use only)"
			}
			if len(d.Replace) > 0 {
				d.Reason += fmt.Sprintf(": replaces %d sized before the load was known", len(d.Replace))
			}
			if parked > 0 {
				d.Reason += fmt.Sprintf(": the first %d, for parked processes, sized to carry the most", parked)
			}
		}
		return d
	case n > floor && in.Now.Sub(in.LastScaleUp) >= opts.CoolDown && in.Now.Sub(in.LastScaleDown) >= opts.CoolDown:
		// Least efficient first; among equals the one put in service last
		// (Replicas are oldest first), as a scale-down by hand takes the
		// newest. Not by ID: IDs are random in the provider and numbered in
		// the simulator, and the choice must not depend on them.
		byEff := make([]ReplicaCapacity, len(in.Replicas))
		for i, r := range in.Replicas {
			byEff[len(byEff)-1-i] = r
		}
		sort.SliceStable(byEff, func(i, j int) bool {
			return capOf(byEff[i].Config)/cost(byEff[i].Config) < capOf(byEff[j].Config)/cost(byEff[j].Config)
		})
		d := Decision{}
		left := n
		for _, r := range byEff {
			if left <= fewestLeft(in.Policy, in.CacheFloor, in.FlapFloor) {
				break
			}
			if rest := without(live, r.Config); sz.serves(rest, demand+downMargin(in)*opts.Headroom) {
				live = rest
				d.Remove = append(d.Remove, r.ID)
				left--
			}
		}
		if n > in.Policy.Max { // a lowered max: shed the least efficient
			for _, r := range byEff {
				if left <= in.Policy.Max {
					break
				}
				if !contains(d.Remove, r.ID) {
					d.Remove = append(d.Remove, r.ID)
					left--
				}
			}
		}
		if len(d.Remove) > 0 {
			d.Reason = fmt.Sprintf("capacity %.1f req/s left covers rate %.1f req/s x %.2f", sz.poolCapacity(live), in.Rate, opts.Headroom)
			if backlog > 0 {
				d.Reason += fmt.Sprintf(" + backlog %.0f / %s", backlog, opts.DrainTime)
			}
			d.Reason += fmt.Sprintf(" without %d replicas", len(d.Remove))
		}
		return d
	}
	return Decision{}
}

// replaceUnsized is the scale-up's alternative to adding beside replicas
// sized before the load was known: replace those that are ready or were
// placed within RestartWithin, and fill what the others leave, if that
// costs less than keeping them and adding add. live is the pool the adds
// complete (replicas first, then warm ones brought back), room how many
// may be added to it. It returns the replicas to replace and what to add
// instead; none and add where keeping them is as cheap.
func replaceUnsized(replicas []ReplicaCapacity, live, add []SliceConfig, demand float64, room, floor int, menu []SliceConfig, best SliceConfig, sz sizer) ([]string, []SliceConfig) {
	var ids []string
	rest := make([]SliceConfig, 0, len(live))
	kept := 0.0
	for i, c := range live {
		if i < len(replicas) && replicas[i].Unsized && (!replicas[i].Starting || replicas[i].StartedFor <= RestartWithin) {
			ids = append(ids, replicas[i].ID)
			kept += sz.cost(c)
			continue
		}
		rest = append(rest, c)
	}
	if len(ids) == 0 {
		return nil, add
	}
	for _, c := range add {
		kept += sz.cost(c)
	}
	alt := fill(menu, rest, demand, room+len(ids), best, sz)
	if len(rest)+len(alt) < floor || !sz.serves(append(slices.Clone(rest), alt...), demand) {
		return nil, add
	}
	instead := 0.0
	for _, c := range alt {
		instead += sz.cost(c)
	}
	if instead >= kept-1e-9 {
		return nil, add
	}
	return ids, alt
}

// downMargin is what a scale-down leaves above the demand (see
// AutoscaleInput.RateError).
func downMargin(in AutoscaleInput) float64 {
	if in.Bursty {
		return 0
	}
	return max(in.RateError, 0)
}

// fewestLeft is how few replicas in service a step down (a scale-down,
// or a resize's merge: Resize) may leave: the scale minimum, at least one,
// a multi-model function's cache floor and a harmful flap's floor. Both
// read it here: the merge once had only the minimum, and took zi13 below
// its cache floor (docs/scheduling.md §4a).
func fewestLeft(p ScalePolicy, cacheFloor, flapFloor int) int {
	return max(p.Min, 1, cacheFloor, flapFloor)
}

// firmRate is the rate a scale-up may open a GPU for: a rise seen on two
// intervals in a row, or else the smoothed rate less its standard error
// (downMargin), the scale-down's margin mirrored. A gap within the
// estimate's own noise is added only where a GPU in use has room: at a
// steady rate near a pool's edge, the noise alone would otherwise open a
// GPU for a minute or more (the cool-downs, consolidation's hold) every
// few minutes, while a climb that lasts passes the margin within a few
// intervals (0.6 req/s at a settled 10 req/s).
func firmRate(in AutoscaleInput) float64 {
	if in.RiseConfirmed {
		return max(in.Rate, in.Rising)
	}
	return in.Rate - downMargin(in)
}

// byEfficiency is rs, the most capacity per cost first; among equals the
// larger first (fewer to bring back), then the last given first (warm
// replicas come most recently idled last: the freshest model cache).
func byEfficiency(rs []ReplicaCapacity, capOf, cost func(SliceConfig) float64) []ReplicaCapacity {
	out := slices.Clone(rs)
	slices.Reverse(out)
	slices.SortStableFunc(out, func(a, b ReplicaCapacity) int {
		ea, eb := capOf(a.Config)/cost(a.Config), capOf(b.Config)/cost(b.Config)
		if ea != eb {
			return cmp.Compare(eb, ea)
		}
		return cmp.Compare(capOf(b.Config), capOf(a.Config))
	})
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// sizer is how the autoscaler and the resizer value a slice: its
// capacity (req/s one replica serves: at the SLO's quantile from the
// queueing model with an SLO, else its full-batch throughput) and its cost
// (the larger of its SM % and its memory's share of a GPU).
//
// A set of replicas is valued as a pool (poolServes): they share the
// function's queue, so together they serve more than the sum of capOf.
type sizer struct {
	capOf, cost func(SliceConfig) float64
	slo         time.Duration
	quantile    float64
}

func newSizer(slo time.Duration, quantile, memoryPercent float64) sizer {
	if quantile <= 0 || quantile >= 1 {
		quantile = DefaultSLOQuantile
	}
	sz := sizer{
		capOf:    func(c SliceConfig) float64 { return c.Throughput },
		cost:     func(c SliceConfig) float64 { return max(float64(c.SMPercent), memoryPercent) },
		slo:      slo,
		quantile: quantile,
	}
	if slo > 0 {
		sz.capOf = func(c SliceConfig) float64 { return QueueCapacity(c, slo, quantile) }
	}
	return sz
}

// serves reports whether replicas cs together hold the function's SLO at
// rate (without an SLO: their summed throughput covers it).
func (sz sizer) serves(cs []SliceConfig, rate float64) bool {
	return poolServes(cs, rate, sz.slo, sz.quantile)
}

// poolCapacity is the rate replicas cs together serve (see serves).
func (sz sizer) poolCapacity(cs []SliceConfig) float64 {
	return PoolCapacity(cs, sz.slo, sz.quantile)
}

// without is cs less one replica of c.
func without(cs []SliceConfig, c SliceConfig) []SliceConfig {
	out := make([]SliceConfig, 0, len(cs))
	dropped := false
	for _, x := range cs {
		if !dropped && x == c {
			dropped = true
			continue
		}
		out = append(out, x)
	}
	return out
}

// plus is cs and k replicas of c.
func plus(cs []SliceConfig, c SliceConfig, k int) []SliceConfig {
	out := make([]SliceConfig, len(cs), len(cs)+k)
	copy(out, cs)
	for range k {
		out = append(out, c)
	}
	return out
}

// menu is the configs that carry any load at all.
func (sz sizer) menu(cs []SliceConfig) []SliceConfig {
	var out []SliceConfig
	for _, c := range cs {
		if sz.capOf(c) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// joinsPools is which slices of menu a replica may take that makes a
// pool of n replicas with those it joins: any where n is 1, since a lone
// replica is its own queue (at light load the slice whose full batch is
// too slow to pool serves by its partial batches: the consolidation
// run's functions, one replica each, on one GPU); for a larger pool,
// with an SLO, those a pool can time (poolable) where the menu holds
// any. One that cannot serves only what it holds alone (the split in
// poolServes), a fraction of a req/s where its batch after a wait
// passes the SLO (densenet169 at 61 ms: 5 %, 0.18 req/s, where 40 %
// pools at 17 req/s a replica), yet is the cheapest slice: a pool of
// them holds its model's memory many times for nothing.
func (sz sizer) joinsPools(menu []SliceConfig) func(c SliceConfig, n int) bool {
	if sz.slo <= 0 || !slices.ContainsFunc(menu, func(c SliceConfig) bool { return poolable(c, sz.slo) }) {
		return func(SliceConfig, int) bool { return true }
	}
	return func(c SliceConfig, n int) bool { return n <= 1 || poolable(c, sz.slo) }
}

// fill right-sizes the replicas added to live so that together they hold
// the SLO at demand, at most room of them: for each slice on the menu,
// the fewest copies that do (the pool's capacity, see serves), the last
// of them then the cheapest slice that still completes the pool, so each
// new replica is sized for the load it will carry; and of those plans the
// one of least total cost — not the slice with the best capacity per cost
// alone, which at a tight SLO is often a small slice that needs many
// copies, nor the plan cheapest before its last copy is right-sized (one
// 30 % replica and two 15 % ones cost the same, and 15 % + 10 % less).
// Where no slice does within room, room copies of best.
func fill(menu, live []SliceConfig, demand float64, room int, best SliceConfig, sz sizer) []SliceConfig {
	if room <= 0 || sz.serves(live, demand) {
		return nil
	}
	var plan []SliceConfig
	planCost, planCapacity := 0.0, 0.0
	pools := sz.joinsPools(menu)
	for _, c := range menu {
		if !sz.serves(plus(live, c, room), demand) {
			continue
		}
		lo, hi := 0, room // serves at hi, not at lo
		for hi-lo > 1 {
			mid := (lo + hi) / 2
			if sz.serves(plus(live, c, mid), demand) {
				hi = mid
			} else {
				lo = mid
			}
		}
		if !pools(c, len(live)+hi) {
			continue
		}
		p := completed(menu, live, c, hi, demand, sz, pools)
		cost, capacity := 0.0, 0.0
		for _, x := range p {
			cost, capacity = cost+sz.cost(x), capacity+sz.capOf(x)
		}
		// At one cost, the more capacity (free headroom, as cheaper
		// orders slices), then the fewer replicas.
		if plan == nil || cost < planCost-1e-9 ||
			math.Abs(cost-planCost) <= 1e-9 && (capacity > planCapacity+1e-9 ||
				math.Abs(capacity-planCapacity) <= 1e-9 && (len(p) < len(plan) || len(p) == len(plan) && cheaper(p[0], plan[0], sz))) {
			plan, planCost, planCapacity = p, cost, capacity
		}
	}
	if plan == nil {
		return plus(nil, best, room)
	}
	return plan
}

// parkedFirst is fill for a scale-up that needs more replicas than the
// function has parked processes ready: the first adds, those that take
// the parked processes, each get the slice that carries the most of what
// is left to serve (the cheapest that completes the pool, else the one
// of most capacity), and fill sizes the rest. Right-sized, a burst of
// several times the rate is mostly new replicas that wait for a
// container start (3-30 s where simulated), while the one or two that
// take a parked process serve after a second and their model's load:
// the first burst, before any warm replica or expected burst, missed in
// those seconds.
// The larger slices cost more than a right-sized pool while they serve:
// a scale-down takes the least efficient first, and a resize replaces
// one by a smaller slice once the load falls.
func parkedFirst(menu, live []SliceConfig, demand float64, room, parked int, best SliceConfig, sz sizer) []SliceConfig {
	pools := sz.joinsPools(menu)
	pool := slices.Clone(live)
	var add []SliceConfig
	for range min(parked, room) {
		var pick SliceConfig
		found, completes := false, false
		for _, c := range menu {
			if !pools(c, len(pool)+1) {
				continue
			}
			done := sz.serves(append(pool, c), demand)
			switch {
			case !found,
				done && (!completes || cheaper(c, pick, sz)),
				!done && !completes && (sz.capOf(c) > sz.capOf(pick)+1e-9 || math.Abs(sz.capOf(c)-sz.capOf(pick)) <= 1e-9 && cheaper(c, pick, sz)):
				pick, found, completes = c, true, done
			}
		}
		if !found {
			break
		}
		pool, add = append(pool, pick), append(add, pick)
		if completes {
			return add
		}
	}
	return append(add, fill(menu, pool, demand, room-len(add), best, sz)...)
}

// completed is k copies of c added to live, the last one then the
// cheapest slice on the menu with which the pool still serves demand.
func completed(menu, live []SliceConfig, c SliceConfig, k int, demand float64, sz sizer, pools func(SliceConfig, int) bool) []SliceConfig {
	out := plus(nil, c, k-1)
	rest := append(plus(live, c, k-1), SliceConfig{})
	last := c
	for _, x := range menu {
		rest[len(rest)-1] = x
		if cheaper(x, last, sz) && pools(x, len(rest)) && sz.serves(rest, demand) {
			last = x
		}
	}
	return append(out, last)
}

// cheapestCovering is the cheapest config (then the fewest SM %, then the
// most capacity) whose capacity covers load; false when none does.
func cheapestCovering(cs []SliceConfig, load float64, sz sizer) (SliceConfig, bool) {
	var pick *SliceConfig
	for i := range cs {
		c := &cs[i]
		if sz.capOf(*c)+1e-9 < load {
			continue
		}
		if pick == nil || cheaper(*c, *pick, sz) {
			pick = c
		}
	}
	if pick == nil {
		return SliceConfig{}, false
	}
	return *pick, true
}

// cheaper orders configs covering the same load: cost, then capacity
// (more first: at one cost, where memory sets it, the larger SM share is
// free headroom), then SM %, then batch.
func cheaper(a, b SliceConfig, sz sizer) bool {
	if ca, cb := sz.cost(a), sz.cost(b); ca != cb {
		return ca < cb
	}
	if qa, qb := sz.capOf(a), sz.capOf(b); qa != qb {
		return qa > qb
	}
	if a.SMPercent != b.SMPercent {
		return a.SMPercent < b.SMPercent
	}
	return a.Batch < b.Batch
}

// SmallestSlice is the slice a new replica gets before its load is known
// (a deploy, a scale by hand or from zero) for a function with an SLO: the
// cheapest on the menu that carries any load at the SLO (see Autoscale
// for capacity and cost). The autoscaler adds to it within a tick of the
// load showing, right-sized, and Resize merges what it added; starting
// from the plan's most efficient slice instead holds a light function's
// GPU share for nothing. false: no slice carries load at the SLO.
func SmallestSlice(configs []SliceConfig, slo time.Duration, quantile, memoryPercent float64) (SliceConfig, bool) {
	sz := newSizer(slo, quantile, memoryPercent)
	return cheapestCovering(sz.menu(configs), 1e-9, sz)
}

// mostEfficient is the config with the best capacity per cost (SM %, or
// the memory's share where larger); ties to
// the smaller slice, then the smaller batch.
func mostEfficient(cs []SliceConfig, capOf, cost func(SliceConfig) float64) SliceConfig {
	best := cs[0]
	eff := func(c SliceConfig) float64 { return capOf(c) / cost(c) }
	for _, c := range cs[1:] {
		e, be := eff(c), eff(best)
		if e > be+1e-12 || (math.Abs(e-be) <= 1e-12 && (c.SMPercent < best.SMPercent || c.SMPercent == best.SMPercent && c.Batch < best.Batch)) {
			best = c
		}
	}
	return best
}

// smallestCovering is the cheapest config (then the fewest SM %) whose
// capacity covers gap; best if none does.
func smallestCovering(cs []SliceConfig, gap float64, best SliceConfig, capOf, cost func(SliceConfig) float64) SliceConfig {
	if c, ok := cheapestCovering(cs, gap, sizer{capOf: capOf, cost: cost}); ok {
		return c
	}
	return best
}

// RateEstimator smooths a request counter into a rate with an
// exponentially weighted moving average, corrected for its start: the
// average over a new estimator's first half-lives weighs the intervals it
// has seen by all the weight there is, not by a share of it and the rest
// by a rate of 0 it never saw (the bias correction of an average started
// at 0). A new function's rate is then what it has been asked so far, not
// a fraction of it that climbs for half a minute (which the rise test
// read as a rise at every ordinary count, adding replicas for nothing).
type RateEstimator struct {
	// HalfLife is how long until an old rate counts half.
	HalfLife time.Duration
	last     time.Time
	count    uint64
	rate     float64
	// raw is the average started at 0 and weight the share of the
	// average's weight its intervals hold (1 - 2^(-elapsed/half-life));
	// rate is raw / weight.
	raw, weight float64
	started     bool
	// inst and dt are the last interval's own rate and length.
	inst, dt float64
	// roseBefore: the interval before the last was a rise (Rising).
	roseBefore bool
	// sq is the sum of the intervals' squared weights (as in raw), each
	// over its length: raw's variance per unit of a Poisson rate.
	sq float64
}

// Observe feeds the counter's value at now and returns the smoothed rate.
func (e *RateEstimator) Observe(count uint64, now time.Time) float64 {
	if !e.started {
		e.started, e.last, e.count = true, now, count
		return e.rate
	}
	dt := now.Sub(e.last).Seconds()
	if dt <= 0 {
		return e.rate
	}
	e.roseBefore = e.Rising() > e.rate
	inst := float64(count-e.count) / dt
	hl := e.HalfLife.Seconds()
	if hl <= 0 {
		hl = 10
	}
	alpha := 1 - math.Exp2(-dt/hl)
	e.raw += alpha * (inst - e.raw)
	e.weight += alpha * (1 - e.weight)
	e.sq = (1-alpha)*(1-alpha)*e.sq + alpha*alpha/dt
	e.rate = e.raw / e.weight
	e.last, e.count = now, count
	e.inst, e.dt = inst, dt
	return e.rate
}

// risingFalseAlarm is how often noise at a steady rate may pass for a
// rise: the one-sided tail of 3 normal deviations, once in about 740
// one-second intervals. A shorter interval gets its share of it (a quarter
// over 250 ms), so that looking more often (lifecycle.Core.Rise) does not
// add false rises: once in 740 s whatever the interval.
const risingFalseAlarm = 0.00135

// Rising is the rate a scale-up should plan for: the last interval's own
// rate when its count is one a Poisson count at the smoothed rate reaches
// less often than risingFalseAlarm (a rise, which the average takes a
// half-life to follow), else the smoothed rate. So noise at a steady rate
// passes the test at most once in 740 s at any rate, and does not
// add replicas for nothing; a doubling of 10 req/s over 1 s passes it 36 %
// of the time, of 100 req/s almost always. The Poisson tail, not 3 normal
// deviations above the mean (as before): at a light load's counts its
// tail is heavier (at 10 req/s over 1 s, 20 requests come once in 290
// intervals, not 740), and with many light functions the false rises
// added a replica somewhere every half a minute, on a GPU of its own once
// the one in use was full.
func (e *RateEstimator) Rising() float64 {
	if e.dt <= 0 {
		return e.rate
	}
	// At least one request expected: after an idle spell the average
	// decays towards 0, and one request is not a rise.
	want := max(e.rate*e.dt, 1)
	if poissonTail(want, e.inst*e.dt) < risingFalseAlarm*min(e.dt, 1) {
		return e.inst
	}
	return e.rate
}

// poissonTail is P(X >= n) for X Poisson with mean mu, n rounded down to
// a whole count; 1 for a count within a deviation of the mean (the tail
// is then far above any false-alarm rate, and summing it is not needed).
func poissonTail(mu, n float64) float64 {
	k := math.Floor(n + 1e-9)
	if k <= mu+math.Sqrt(mu) {
		return 1
	}
	lg, _ := math.Lgamma(k + 1)
	term := math.Exp(k*math.Log(mu) - mu - lg)
	sum := 0.0
	// Beyond the mean the terms fall by mu/(j+1) each: a few deviations'
	// worth of them is the whole tail to 1e-12.
	for j := k; term > 1e-12*sum && term > 0; j++ {
		sum += term
		term *= mu / (j + 1)
	}
	return sum
}

// Rate is the last smoothed rate.
func (e *RateEstimator) Rate() float64 { return e.rate }

// Error is the standard error of Rate were the requests Poisson at that
// rate: the average weighs each interval's count, whose variance is the
// rate over the interval's length, so a new estimator's is large (one
// second at 10 req/s: 3.2 req/s) and a settled one's is sqrt(rate x
// alpha / (2 - alpha)) (10 req/s over 1-s intervals, a 10-s half-life:
// 0.59 req/s). 0 before a rate is known.
func (e *RateEstimator) Error() float64 {
	if e.weight <= 0 || e.rate <= 0 {
		return 0
	}
	return math.Sqrt(e.rate*e.sq) / e.weight
}

// RiseConfirmed reports whether the last interval is a rise (Rising
// above Rate) and the one before it was too: two intervals that do not
// overlap, so a steady rate passes it about risingFalseAlarm^2 of the
// time, while a step that lasts passes it an interval after it shows.
func (e *RateEstimator) RiseConfirmed() bool {
	return e.roseBefore && e.Rising() > e.rate
}

// RisingLow is Rising's rate less its count's noise: where the last
// interval is a rise, the rate its count shows with a deviation taken off
// ((sqrt(n) - 1)^2 / dt), so a short interval's upward noise, which the
// rise test selects, is not planned for; else the smoothed rate.
func (e *RateEstimator) RisingLow() float64 {
	r := e.Rising()
	if r <= e.rate || e.dt <= 0 {
		return r
	}
	n := e.inst * e.dt
	low := math.Pow(max(math.Sqrt(n)-1, 0), 2) / e.dt
	return max(low, e.rate)
}
