package scheduler

// Candidate is a ready replica the LALB router may send a request to (the
// simulator's lb/lalb policies; the provider dispatches with Pull).
type Candidate struct {
	ID       string
	InFlight int64
	// Holds is true when the replica has the request's model in memory.
	Holds bool
	// Models is how many models the replica holds.
	Models int
}

// less orders two candidates by in-flight count, then ID, so the choice is
// deterministic, never random.
func less(a, b Candidate) bool {
	return a.InFlight < b.InFlight || (a.InFlight == b.InFlight && a.ID < b.ID)
}

// LocalityAware is the GPU-enabled FaaS paper's LALB: the least loaded
// replica holding the model, unless even it has bound or more requests in
// flight; then the least loaded replica of all (which will load the model).
func LocalityAware(cands []Candidate, bound int64) int {
	best := -1
	for i, c := range cands {
		if c.Holds && c.InFlight < bound && (best < 0 || less(c, cands[best])) {
			best = i
		}
	}
	if best >= 0 {
		return best
	}
	// A miss: the least loaded replica, and among those the one holding
	// fewest models, so the load evicts least and models spread out.
	for i, c := range cands {
		if best < 0 {
			best = i
			continue
		}
		b := cands[best]
		if c.InFlight < b.InFlight || c.InFlight == b.InFlight && (c.Models < b.Models || c.Models == b.Models && c.ID < b.ID) {
			best = i
		}
	}
	return best
}
