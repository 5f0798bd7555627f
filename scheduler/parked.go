package scheduler

import (
	"sort"
	"time"
)

// ParkedAutoMax bounds a learnt parked count (ScalePolicy.ParkedAuto): a
// parked process holds host memory (a PyTorch server's imports, about
// half a GiB), and a function that once started more at once than this
// is better served by a standby or a higher minimum than by processes
// held for the rare burst.
const ParkedAutoMax = 8

// ParkedNeed is how many parked processes would have served every one of
// a function's starts: the most of starts that fall within any span of
// window, the time a parked process takes to start (a taken one's
// successor is not ready sooner, so starts closer together than that each
// need their own). At least 1, so that a function that asked has one for
// its first start; at most max (ParkedAutoMax, or fewer by its maximum
// replicas). Pure: starts need not be sorted, and are not changed.
func ParkedNeed(starts []time.Time, window time.Duration, max int) int {
	if max < 1 {
		return 0
	}
	ts := append([]time.Time(nil), starts...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
	need := 1
	lo := 0
	for hi := range ts {
		for ts[hi].Sub(ts[lo]) >= window && lo < hi {
			lo++
		}
		if n := hi - lo + 1; n > need {
			need = n
		}
	}
	return min(need, max)
}
