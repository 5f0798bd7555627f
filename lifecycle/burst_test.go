package lifecycle

import (
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
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
			var due []int // seconds of scale-ups for a due burst
			c := runBursts(t, store, tt.onsets, tt.next, func(s int, res Result) {
				for _, sc := range res.Scaled {
					if strings.Contains(sc.Reason, "a burst is due") {
						due = append(due, s)
					}
				}
			})
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

// The capacity started ahead of an expected burst is sized at the last
// burst's smoothed peak, or, where consolidation stopped the function's
// warm replicas since that burst began, up to the highest rate planned
// for within it by what those replicas served: they covered what the
// smoothed peak leaves out, and no more is started than they took away.
func TestExpectedBurstAfterAYield(t *testing.T) {
	store := builtinStore(t)
	onsets, next := []int{60, 150, 240}, 330
	tests := []struct {
		name    string
		yielded int     // seconds; 0: never
		rate    float64 // what the replicas yielded served
		raise   float64 // over the smoothed peak; -1: up to the planned one
		// mix: the function serves a mix of models (its yielded
		// replicas were model caches).
		mix bool
	}{
		{"no yield", 0, 0, 0, false},
		{"a yield before the last burst", 200, 500, 0, false},
		{"a yield after the last burst began", 270, 500, -1, false},
		{"a small yield after the last burst began", 270, 30, 30, false},
		{"a small yield of a multi-model function's caches: up to the planned peak", 270, 30, -1, true},
		{"no yield of a multi-model function", 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := next - 5 // within the burst's lead
			c := runBursts(t, store, onsets, at, nil)
			fn := c.functions[rnKey]
			if tt.yielded > 0 {
				fn.yieldedAt = t0.Add(time.Duration(tt.yielded) * time.Second)
				fn.yieldedRate = tt.rate
			}
			if tt.mix {
				// A mix with no model known yet: nothing to load beyond
				// the start-up, so the lead is the single-model one.
				fn.mix = &mixState{}
			}
			now := t0.Add(time.Duration(at) * time.Second)
			smoothed, due := fn.burst.ExpectedBurst(now, fn.burstLead())
			planned, _, _ := fn.burst.PlannedPeak()
			if !due || planned <= smoothed+50 {
				t.Fatalf("due %v, planned peak %.0f against smoothed %.0f: the trace shows nothing to test", due, planned, smoothed)
			}
			in := scheduler.AutoscaleInput{SLO: fn.plan.Request.SLO, Rising: 100}
			if !c.expectBurst(fn, &in, now) {
				t.Fatal("the burst is not expected")
			}
			want := smoothed + tt.raise
			if tt.raise < 0 {
				want = planned
			}
			if in.Rising != want || !in.RiseConfirmed {
				t.Errorf("expected at %.0f req/s (confirmed %v), want %.0f (smoothed peak %.0f, planned %.0f)", in.Rising, in.RiseConfirmed, want, smoothed, planned)
			}
		})
	}
}

// runBursts deploys rnSpec and runs it at 100 req/s with 15-s bursts of
// 400 from each of onsets (seconds), ticking every second before end,
// with every replica ready at once; seen, where not nil, gets each tick's
// result.
func runBursts(t *testing.T, store *profiles.Store, onsets []int, end int, seen func(s int, res Result)) *Core {
	t.Helper()
	c := New(inventory(1, 4), nil, Options{Profiles: store})
	if _, err := c.Deploy(rnSpec(), t0); err != nil {
		t.Fatal(err)
	}
	l := Load{}
	for s := 1; s < end; s++ {
		n := uint64(100)
		for _, o := range onsets {
			if s >= o && s < o+15 {
				n = 400
			}
		}
		now := t0.Add(time.Duration(s) * time.Second)
		res := tickWith(c, rnKey, &l, n, now)
		readyAll(c, now)
		if seen != nil {
			seen(s, res)
		}
	}
	return c
}
