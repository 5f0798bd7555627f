package lifecycle

import (
	"testing"
	"time"
)

// A function that stops for a while (an on/off trace's off period) comes
// back at the load it had: its smoothed rate decays through the gap, yet
// its replica keeps its size (scheduler.InIdleGap), and when the load
// comes back it is not resized to the rate the gap left behind (the
// cool-down from ResizeInput.Resumed). A function whose load falls and
// goes on is still resized down.
func TestNoResizeInAnIdleGap(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name string
		// after a minute at 300 req/s: off seconds with no request, then
		// after requests a second
		off     int
		after   uint64
		resized bool
	}{
		{"an off period: kept", 90, 0, false},
		{"an off period, then the load back: kept", 40, 300, false},
		{"a lower load that goes on: resized down", 0, 5, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, l, now := steadyRN(t, store, 1, 300, 60)
			resized := false
			for s := 1; s <= 90; s++ {
				now = now.Add(time.Second)
				var res Result
				if s > tt.off {
					res = tickWith(c, rnKey, l, tt.after, now)
				} else {
					c.ObserveLoad(rnKey, *l)
					res = c.Tick(now)
				}
				readyAll(c, now)
				for _, sc := range res.Scaled {
					if sc.Resize {
						resized = true
						t.Logf("%s: %s", now.Sub(t0), sc.Reason)
					}
				}
			}
			if resized != tt.resized {
				t.Errorf("resized in the 90 s after the load changed: %v, want %v", resized, tt.resized)
			}
		})
	}
}
