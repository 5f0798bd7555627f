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
			// Requests every gap for 8 gaps, a tick every second as a
			// backend runs it, then none.
			var requests uint64
			var last time.Time
			end := t0.Add(8 * tc.gap)
			for now := t0.Add(time.Second); !now.After(end.Add(tc.idle)); now = now.Add(time.Second) {
				for next := t0.Add(time.Duration(requests+1) * tc.gap); !next.After(now) && !next.After(end); next = t0.Add(time.Duration(requests+1) * tc.gap) {
					requests++
					last = next
				}
				c.ObserveLoad("openfaas-fn/f", Load{Requests: requests, LastRequest: last})
				c.Tick(now)
			}
			v, _ := c.Function("openfaas-fn/f")
			if got := len(v.Warm) == 1; got != tc.warm {
				t.Errorf("warm replica kept: %v, want %v", got, tc.warm)
			}
		})
	}
}

// A warm replica rebooked when the cluster's GPUs change (a node added)
// keeps its age: its lifetime does not start again. Seen failing in
// test/parity, where the local backend's rebook at a node's return made
// its warm replicas younger than the simulator's.
func TestRebookKeepsWarmAge(t *testing.T) {
	c := New(inventory(1, 2), nil, Options{})
	if _, err := c.Deploy(fn("f", 30, 2, 1, 2), t0); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 1} {
		if _, _, err := c.Scale("openfaas-fn", "f", n, t0); err != nil {
			t.Fatal(err)
		}
	}
	c.SetInventory(inventory(2, 2), t0.Add(5*time.Minute)) // node n1 added: every booking is made again
	idle := c.Cache().Idle("")
	if len(idle) != 1 || !idle[0].Since.Equal(t0) {
		t.Fatalf("warm replicas after the rebook: %+v, want one idle since %s", idle, t0)
	}
}
