package scheduler

import (
	"slices"
	"sort"
)

// ModelHolder is one replica of a multi-model function in service, as
// PlaceModels sees it: the room its slice has for models, what it holds and
// what it is loading now.
type ModelHolder struct {
	// Room is the bytes of models its slice holds (Plan.ModelRoom).
	Room int64
	// Used is the bytes of the models it holds now.
	Used int64
	// Holds are the models it holds now.
	Holds []string
	// Loading is the model it was told to load and does not hold yet;
	// "": none. A replica loads one at a time.
	Loading string
}

// ModelLoad is one model for one holder to load in its idle time,
// keeping what it holds.
type ModelLoad struct {
	Holder int
	Model  string
	Bytes  int64 // the model's profiled size
}

// PlaceModels spreads a multi-model function's models over the free room
// of its replicas in service, one load per replica that loads nothing now:
// each takes the model of the mix that the replicas hold fewest copies of
// (one being loaded counts), the most requested first among equals, that
// fits its free room. A model is never evicted for another here: only
// room the slice books anyway, and that no request has used, is filled.
//
// Why copies before shares: a model no replica holds costs a load (and
// an eviction) at its next request, while the requests on the slice's
// timing, its mix, wait on the replica that loads it; a copy more of the
// most requested model saves no load. The simulator's zoo suites measured
// that loads while requests wait, not the slices' timing, were what their
// steady loads missed on (docs/evaluation.md, "Multi-model functions
// drawn at random: the zoo suites" and "Models placed in idle time").
//
// mix is the function's models by share (shares ≤ 0 and models of unknown
// size are left out: nothing to plan for); the result is in holder order.
func PlaceModels(mix []ModelShare, holders []ModelHolder, out []ModelLoad) []ModelLoad {
	type cand struct {
		name   string
		bytes  int64
		share  float64
		copies int
	}
	var cands []cand
	index := map[string]int{}
	for _, m := range mix {
		if m.Profile == nil || m.Share <= 0 || m.Profile.ModelSizeBytes <= 0 {
			continue
		}
		if _, dup := index[m.Profile.Model]; dup {
			continue
		}
		index[m.Profile.Model] = len(cands)
		cands = append(cands, cand{name: m.Profile.Model, bytes: m.Profile.ModelSizeBytes, share: m.Share})
	}
	if len(cands) == 0 {
		return out
	}
	count := func(name string) {
		if i, ok := index[name]; ok {
			cands[i].copies++
		}
	}
	for _, h := range holders {
		for _, m := range h.Holds {
			count(m)
		}
		if h.Loading != "" && !slices.Contains(h.Holds, h.Loading) {
			count(h.Loading)
		}
	}
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	for hi, h := range holders {
		if h.Loading != "" || h.Room <= 0 {
			continue
		}
		// Re-sorted per holder: the one before took a copy.
		sort.SliceStable(order, func(a, b int) bool {
			ca, cb := cands[order[a]], cands[order[b]]
			if ca.copies != cb.copies {
				return ca.copies < cb.copies
			}
			if ca.share != cb.share {
				return ca.share > cb.share
			}
			return ca.name < cb.name
		})
		free := h.Room - h.Used
		for _, i := range order {
			c := &cands[i]
			if c.bytes > free || slices.Contains(h.Holds, c.name) {
				continue
			}
			c.copies++
			out = append(out, ModelLoad{Holder: hi, Model: c.name, Bytes: c.bytes})
			break
		}
	}
	return out
}
