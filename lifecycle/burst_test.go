package lifecycle

import (
	"strings"
	"testing"
	"time"
)

// A function whose bursts recur at a steady period has its next burst's
// capacity started a start-up ahead of it (RateHistory.ExpectedBurst);
// one whose bursts come at no steady interval is scaled only as its load
// rises.
func TestExpectedBurstStartsCapacityAhead(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name   string
		onsets []int // seconds: 400 req/s for 15 s on a base of 100
		next   int   // the burst after them
		ahead  bool
	}{
		{"every 90 s", []int{60, 150, 240}, 330, true},
		{"at 60, then 150 s, then 60 s", []int{60, 210, 270}, 330, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 4), nil, Options{Profiles: store})
			if _, err := c.Deploy(rnSpec(), t0); err != nil {
				t.Fatal(err)
			}
			l := Load{}
			var due []int // seconds of scale-ups for a due burst
			for s := 1; s < tt.next; s++ {
				n := uint64(100)
				for _, o := range tt.onsets {
					if s >= o && s < o+15 {
						n = 400
					}
				}
				now := t0.Add(time.Duration(s) * time.Second)
				res := tickWith(c, rnKey, &l, n, now)
				readyAll(c, now)
				for _, sc := range res.Scaled {
					if strings.Contains(sc.Reason, "a burst is due") {
						due = append(due, s)
					}
				}
			}
			// Replicas here are ready at once: the lead is the margin alone.
			ahead := len(due) > 0 && due[0] >= tt.next-int(burstLeadMargin.Seconds())-2
			if ahead != tt.ahead || len(due) > 0 && !tt.ahead {
				t.Errorf("scale-ups for a due burst at %v s, want ahead of the burst at %d s: %v", due, tt.next, tt.ahead)
			}
			if v, _ := c.Function(rnKey); tt.ahead && len(v.Live) < 2 {
				t.Errorf("%d replicas in service as the burst is due", len(v.Live))
			}
		})
	}
}
