package scheduler

// Waiting is a request queued until a replica is free.
type Waiting struct {
	Seq   uint64
	Model string
}

// QueueView is what NextFor knows of the replicas besides the free one.
type QueueView struct {
	// Holds: the free replica has the model in memory.
	Holds func(model string) bool
	// BusyHolder: a busy replica has the model in memory, so a request for
	// it may wait for that replica instead of loading the model again.
	BusyHolder func(model string) bool
	// Bound is how many requests for one model wait for a busy holder
	// before the next one loads the model elsewhere (LALB's bound).
	Bound int
	// OutOfOrder lets a free replica take a later request whose model it
	// holds ahead of earlier ones (LALB+O3 in the GPU-enabled FaaS paper).
	OutOfOrder bool
}

// NextFor picks the queued request a replica that just became free takes,
// or -1 for none. Out of order it takes the oldest request whose model it
// holds; then, in either mode, the oldest request that may load its model
// here: one whose model no busy replica holds, or that has Bound requests
// for the same model ahead of it. In order, only the head may go.
func NextFor(queue []Waiting, v QueueView) int {
	if len(queue) == 0 {
		return -1
	}
	if v.OutOfOrder {
		for i, w := range queue {
			if v.Holds(w.Model) {
				return i
			}
		}
	}
	ahead := map[string]int{}
	for i, w := range queue {
		if !v.OutOfOrder && i > 0 {
			return -1
		}
		if v.Holds(w.Model) || !v.BusyHolder(w.Model) || ahead[w.Model] >= v.Bound {
			return i
		}
		ahead[w.Model]++
	}
	return -1
}
