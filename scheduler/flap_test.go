package scheduler

import (
	"testing"
	"time"
)

func TestFlapGuard(t *testing.T) {
	const budget = 0.01
	type up struct {
		after           time.Duration // since the down
		served, missed  uint64        // running counts at the up
		backlog, settle float64
	}
	tests := []struct {
		name      string
		up        up
		wantFloor int
		wantHold  time.Duration
	}{
		{"misses past the budget: held at the count before the down", up{20 * time.Second, 1000 + 500, 10 + 30, 0, 5}, 3, flapHoldMin},
		{"misses within it and no queue: a cheap flap, nothing held", up{20 * time.Second, 1000 + 500, 10 + 4, 2, 5}, 0, 0},
		{"a queue past what the pool clears in an SLO: held", up{20 * time.Second, 1000 + 500, 10, 40, 5}, 3, flapHoldMin},
		{"an up past the window is the load moving, not a flap", up{flapWindow + time.Second, 1000 + 500, 10 + 30, 0, 5}, 0, 0},
		{"counters that went back (a restart): nothing to judge", up{20 * time.Second, 100, 10 + 30, 0, 5}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := FlapGuard{}.ScaledDown(t0, 3, 1000, 10)
			at := t0.Add(tt.up.after)
			g = g.ScaledUp(at, tt.up.served, tt.up.missed, tt.up.backlog, tt.up.settle, budget)
			hold, floor := g.Held(at)
			if floor != tt.wantFloor || hold != tt.wantHold {
				t.Errorf("held %d for %v, want %d for %v", floor, hold, tt.wantFloor, tt.wantHold)
			}
			if got := g.Floor(at.Add(hold)); got != 0 {
				t.Errorf("floor %d once the hold ends, want 0", got)
			}
		})
	}
}

// Flaps in a row double the hold up to flapHoldMax; one long after the
// last hold ended starts again at flapHoldMin. An up with no down before
// it in the window holds nothing.
func TestFlapGuardBacksOff(t *testing.T) {
	var g FlapGuard
	now := t0
	flap := func(gap time.Duration) time.Duration {
		now = now.Add(gap)
		g = g.ScaledDown(now, 4, 0, 0)
		now = now.Add(10 * time.Second)
		g = g.ScaledUp(now, 100, 50, 0, 1, 0.01)
		hold, _ := g.Held(now)
		return hold
	}
	var holds []time.Duration
	for range 5 {
		hold := flap(0)
		holds = append(holds, hold)
		now = now.Add(hold) // the hold ends, and the next down flaps
	}
	want := []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i := range want {
		if holds[i] != want[i] {
			t.Errorf("holds %v, want %v", holds, want)
			break
		}
	}
	if hold := flap(flapHoldMax + time.Minute); hold != flapHoldMin {
		t.Errorf("a flap %v after the last hold ended is held %v, want %v", flapHoldMax+time.Minute, hold, flapHoldMin)
	}
	before := g
	now = now.Add(time.Hour)
	if g = g.ScaledUp(now, 200, 150, 0, 1, 0.01); g.Floor(now) != 0 || g != before {
		t.Errorf("an up with no down in its window changed the guard: floor %d", g.Floor(now))
	}
}
