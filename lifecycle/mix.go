package lifecycle

import (
	"math"
	"sort"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// mixHalfLife is how fast a multi-model function's model shares and load
// rate forget: slower than the rate's 10 s, since a rare model is seen a
// few times a minute, and a mix changes more slowly than a rate.
const mixHalfLife = time.Minute

// mixState follows what a multi-model function's requests name: running
// counts as last seen, and their decayed sums since.
type mixState struct {
	at       time.Time
	seen     map[string]uint64 // Load.Models at the last tick
	seenLoad uint64            // Load.Loads at the last tick
	seenReqs uint64            // the sum of Load.Models at the last tick
	shares   map[string]float64
	loads    float64
	requests float64
	// menu is the mix's autoscaler menu at the last tick (nil: not
	// known yet), mix what it was made from.
	menu []scheduler.SliceConfig
	mix  scheduler.Mix
}

// observeMix folds fn's per-model counts and loads since the last tick
// into its decayed shares and rebuilds its menu (scheduler.MixConfigs) for
// the mix. A function whose proxy reports no per-model counts (one model,
// no X-Model) keeps its plan's menu.
func (c *Core) observeMix(fn *function, now time.Time) {
	if len(fn.load.Models) == 0 || fn.plan.Profile == nil {
		return
	}
	m := fn.mix
	if m == nil {
		m = &mixState{seen: map[string]uint64{}, shares: map[string]float64{}}
		fn.mix = m
	}
	decay := 1.0
	if !m.at.IsZero() {
		decay = math.Exp2(-now.Sub(m.at).Seconds() / mixHalfLife.Seconds())
	}
	m.at = now
	for k := range m.shares {
		m.shares[k] *= decay
	}
	var reqs uint64
	for model, n := range fn.load.Models {
		if d := n - m.seen[model]; n > m.seen[model] {
			m.shares[model] += float64(d)
		}
		m.seen[model] = n
		reqs += n
	}
	m.requests = m.requests*decay + float64(reqs-min(reqs, m.seenReqs))
	m.loads = m.loads*decay + float64(fn.load.Loads-min(fn.load.Loads, m.seenLoad))
	m.seenReqs, m.seenLoad = reqs, fn.load.Loads

	names := make([]string, 0, len(m.shares))
	for k := range m.shares {
		names = append(names, k)
	}
	sort.Strings(names) // a stable order: the same counts give the same menu
	var models []scheduler.ModelShare
	product := fn.plan.Profile.GPU
	for _, name := range names {
		prof, _, ok := c.opts.Profiles.Lookup(name, product)
		if !ok || m.shares[name] <= 0 {
			continue // unprofiled: its requests are served, not planned for
		}
		models = append(models, scheduler.ModelShare{Profile: prof, Share: m.shares[name]})
	}
	m.mix = scheduler.Mix{Models: models, LoadPerRequest: scheduler.MixLoad(models, m.loads, m.requests)}
	maxBatch := 0 // a plan held to smaller batches (the simulator's -max-batch) stays so
	for _, cfg := range fn.plan.Configs {
		maxBatch = max(maxBatch, cfg.Batch)
	}
	m.menu = scheduler.MixConfigs(m.mix, fn.plan.Request.SLO, maxBatch)
}

// mixMenu is fn's menu for the mix its requests name, if known and not
// empty (an empty one: no slice serves every model within the SLO; the
// plan's stays, rather than none).
func (fn *function) mixMenu() ([]scheduler.SliceConfig, bool) {
	if fn.mix == nil || len(fn.mix.menu) == 0 {
		return nil, false
	}
	return fn.mix.menu, true
}

// mixValue is a replica's slice valued on fn's mix: what it serves of
// the requests its function's replicas are actually sent, not of the
// model it was planned on.
func (fn *function) mixValue(cfg scheduler.SliceConfig) scheduler.SliceConfig {
	if _, ok := fn.mixMenu(); !ok {
		return cfg
	}
	if v, _ := scheduler.MixSlice(fn.mix.mix, cfg.SMPercent, max(cfg.Batch, 1), fn.plan.Request.SLO); v.Throughput > 0 {
		return v
	}
	return cfg
}

// modelRoom is the memory a replica of fn has for models
// (scheduler.Plan.ModelRoom), where that is room for more than its first
// model: a replica sized for one model is no cache of several. 0
// otherwise.
func (fn *function) modelRoom() int64 {
	p := fn.plan.Profile
	if p == nil || p.ModelSizeBytes <= 0 {
		return 0
	}
	if room := fn.plan.ModelRoom(fn.plan.Request.MemoryBytes); room > p.ModelSizeBytes {
		return room
	}
	return 0
}
