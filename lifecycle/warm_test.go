package lifecycle

import (
	"testing"
	"time"
)

// A warm replica's lifetime follows its function's idle gaps, which the
// core sees through ObserveLoad: one whose function is idle for longer
// than twice its usual gap goes well before the warm TTL; one whose
// function never paused keeps its memory until the TTL.
func TestWarmLifetimeFollowsIdleGaps(t *testing.T) {
	tests := []struct {
		name string
		gap  time.Duration // between requests, before they stop
		idle time.Duration // since the last request, at the check
		warm bool
	}{
		{"idle for less than twice its 20 s gaps: kept", 20 * time.Second, 35 * time.Second, true},
		{"idle for more than twice its 20 s gaps: gone", 20 * time.Second, 45 * time.Second, false},
		{"no pause seen: kept though idle for minutes", 500 * time.Millisecond, 5 * time.Minute, true},
		{"no pause seen: gone at the TTL", 500 * time.Millisecond, DefaultWarmTTL, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{})
			if _, err := c.Deploy(fn("f", 30, 2, 1, 2), t0); err != nil {
				t.Fatal(err)
			}
			for _, n := range []int{2, 1} { // one replica warm from t0
				if _, _, err := c.Scale("openfaas-fn", "f", n, t0); err != nil {
					t.Fatal(err)
				}
			}
			now, requests := t0, uint64(0)
			for range 8 {
				now = now.Add(tc.gap)
				requests++
				c.ObserveLoad("openfaas-fn/f", Load{Requests: requests, LastRequest: now})
				c.Tick(now)
			}
			c.Tick(now.Add(tc.idle))
			v, _ := c.Function("openfaas-fn/f")
			if got := len(v.Warm) == 1; got != tc.warm {
				t.Errorf("warm replica kept: %v, want %v", got, tc.warm)
			}
		})
	}
}
