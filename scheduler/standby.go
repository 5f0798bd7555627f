package scheduler

// StandbyInput is what decides whether a function keeps a standby: a
// replica started out of service, its model loaded, that holds GPU memory
// the cluster does not need and no SM until a rise promotes it.
type StandbyInput struct {
	AutoscaleInput
	// Settled: every replica in service is ready and none is being
	// replaced, so a standby does not compete with start-ups under way.
	Settled bool
	// Spare counts the function's warm replicas, ready or still starting
	// (AutoscaleInput.Warm lists only the ready ones).
	Spare int
}

// Standby decides the slice of a standby for one function, or false for
// none. A rise is answered by the warm replicas first (Autoscale), which
// serve at once, where a new replica serves only after its start-up and
// model load: the seconds a step's first requests miss in, and that no
// reaction after the step can save (docs/evaluation.md, "The live
// provider"). A function that has been scaled down has warm replicas; one
// that has only grown has none, so it gets one, kept in memory nobody
// needs (the allocator's Hints.Spare) and yielding it as any warm replica
// does. It is the most efficient slice that meets the SLO: the slice
// Autoscale fills a large rise with. None for a function without an SLO
// (nothing to size it by), without replicas in service or traffic (a
// function scaled to zero wakes on demand), at its scale maximum (it could
// never be promoted), while it has a warm replica, or while it is not
// settled.
func Standby(in StandbyInput, opts AutoscaleOptions) (SliceConfig, bool) {
	n := len(in.Replicas)
	if in.SLO <= 0 || !in.Settled || in.Spare > 0 || n == 0 || in.Rate < 1e-3 {
		return SliceConfig{}, false
	}
	if in.Policy.Max > 0 && n >= in.Policy.Max {
		return SliceConfig{}, false
	}
	sz := newSizer(in.SLO, opts.SLOQuantile, in.MemoryPercent)
	menu := sz.menu(in.Configs)
	if len(menu) == 0 {
		return SliceConfig{}, false
	}
	return mostEfficient(menu, sz.capOf, sz.cost), true
}
