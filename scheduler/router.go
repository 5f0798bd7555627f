package scheduler

// Candidate is a ready replica the router may send a request to.
type Candidate struct {
	ID       string
	InFlight int64
}

// LeastOutstanding picks the candidate with the fewest requests in flight;
// ties go to the lowest ID so the choice is deterministic, never random.
// It returns -1 when there is no candidate.
func LeastOutstanding(cands []Candidate) int {
	best := -1
	for i, c := range cands {
		if best < 0 || c.InFlight < cands[best].InFlight || (c.InFlight == cands[best].InFlight && c.ID < cands[best].ID) {
			best = i
		}
	}
	return best
}
