package lifecycle

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// loadGrace is added to twice a model's profiled load time for how long a
// replica told to load it (LoadModel) may take before it is counted as
// not loading it: one that refused, failed (its room taken by the loads
// its requests made meanwhile), or does not speak the protocol is told
// again, or of another model, which costs it nothing it serves.
const loadGrace = 10 * time.Second

// placeModels tells fn's replicas in service to load the models of its
// mix into the room their slices have free (scheduler.PlaceModels), one
// at a time each, so that a request finds its model held instead of
// waiting for a load that evicts another. Only a multi-model function
// whose replicas have room for more than their first model, and whose mix
// is known, is placed.
func (c *Core) placeModels(fn *function, now time.Time, res *Result) {
	if c.cache == nil || fn.mix == nil || len(fn.mix.mix.Models) == 0 || fn.modelRoom() <= 0 {
		return
	}
	var (
		holders []scheduler.ModelHolder
		reps    []*replica
	)
	sizes := map[string]int64{}
	for _, m := range fn.mix.mix.Models {
		sizes[m.Profile.Model] = m.Profile.ModelSizeBytes
	}
	if p := fn.plan.Profile; p != nil {
		sizes[p.Model] = p.ModelSizeBytes
	}
	for _, r := range fn.live {
		if r.phase != Ready || r.placement == nil {
			continue
		}
		if r.loading != "" && (c.cache.Holds(r.id, r.loading) || now.Sub(r.loadingSince) >= c.loadDeadline(fn, r.loading)) {
			r.loading = ""
		}
		// Room and use as the core reckons them, from the slice and the
		// profiles: the backends' caches count a reported model new to
		// them at 0 bytes, and the Kubernetes backend books a replica's
		// whole slice as its room.
		held := c.cache.Models(r.id)
		used := int64(0)
		for _, m := range held {
			used += sizes[m]
		}
		holders = append(holders, scheduler.ModelHolder{Room: fn.plan.ModelRoom(r.placement.Slice.MemoryBytes), Used: used, Holds: held, Loading: r.loading})
		reps = append(reps, r)
	}
	for _, l := range scheduler.PlaceModels(fn.mix.mix.Models, holders, nil) {
		r := reps[l.Holder]
		r.loading, r.loadingSince = l.Model, now
		res.add(Effect{Kind: LoadModel, Function: fn.key, Replica: r.view(), Model: l.Model, ModelBytes: l.Bytes,
			Why: "model placed in free room: the fewest copies of the mix's models"})
	}
}

// loadDeadline is how long a LoadModel of model may take (loadGrace).
func (c *Core) loadDeadline(fn *function, model string) time.Duration {
	return loadGrace + time.Duration(2*c.opts.Profiles.LoadSeconds(model, fn.plan.Profile.GPU)*float64(time.Second))
}
