package lifecycle

import (
	"testing"
	"time"
)

// A rise seen on one short interval adds replicas only where a GPU in use
// has room: with the GPU in use full, a chance count must not open the
// idle one (in the consolidation run such counts held a second GPU for a
// minute each). Seen on the next interval too, the rise opens it.
func TestUnconfirmedRiseOpensNoGPU(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name string
		// full: another function takes the rest of the first GPU's
		// memory; rises: how many Rise passes in a row see the rise.
		full    bool
		rises   int
		added   bool
		opensGP bool // a replica lands on the idle GPU
	}{
		{"a rise seen once, the GPU in use full", true, 1, false, false},
		{"a rise seen twice, the GPU in use full", true, 2, true, true},
		{"a rise seen once, room on the GPU in use", false, 1, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 2), nil, Options{Profiles: store})
			spec := rnSpec()
			if _, err := c.Deploy(spec, t0); err != nil {
				t.Fatal(err)
			}
			key := rnKey
			first := c.Usage()[0]
			if len(first.Replicas) != 1 {
				t.Fatalf("the first replica is not on the first GPU: %+v", c.Usage())
			}
			if tt.full {
				filler := fn("filler", 10, 0, 1, 1)
				filler.GPU.MemoryBytes = first.Device.MemoryBytes - first.MemoryAllocated
				if _, err := c.Deploy(filler, t0); err != nil {
					t.Fatal(err)
				}
				if u := c.Usage()[0]; u.MemoryAllocated != u.Device.MemoryBytes {
					t.Fatalf("the filler did not fill the first GPU: %+v", c.Usage())
				}
			}
			// 30 s at a steady 10 req/s, which the one replica serves.
			l := Load{}
			now := steady(c, key, &l, 10, 30)
			before, _ := c.Function(key)
			if len(before.Live) != 1 {
				t.Fatalf("%d replicas at the steady rate, want 1", len(before.Live))
			}
			// 30 requests in a quarter of a second: 120 req/s.
			var res Result
			for i := 1; i <= tt.rises; i++ {
				l.Requests += 30
				c.ObserveLoad(key, l)
				res = c.Rise(now.Add(time.Duration(i) * 250 * time.Millisecond))
			}
			for _, d := range res.Decisions {
				if d.Err != nil {
					t.Errorf("placement of %s reported pending (%v): a tentative replica that fits nowhere is not added", d.Replica, d.Err)
				}
			}
			after, _ := c.Function(key)
			if got := len(after.Live) > 1; got != tt.added {
				t.Errorf("%d replicas after the rise, want added %v", len(after.Live), tt.added)
			}
			second := c.Usage()[1]
			if got := len(second.Replicas) > 0; got != tt.opensGP {
				t.Errorf("the idle GPU holds %d replicas, want opened %v", len(second.Replicas), tt.opensGP)
			}
			for _, r := range after.Live {
				if r.Placement == nil {
					t.Errorf("replica %s left pending: a tentative one is placed at once or not added", r.ID)
				}
			}
		})
	}
}

// A new function's first rate estimates average a second or two, and a
// chance high one is no peak it has come off: it is not bursty (which
// would keep its spare replicas from the scale-down margin and its
// replicas from merges). A rate that really fell from a busy spell is.
func TestStartIsNoBurst(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name   string
		counts []uint64 // requests each second after the first
		bursty bool
	}{
		{"a high first second, then steady", append([]uint64{16}, repeat(10, 20)...), false},
		{"steady", repeat(10, 21), false},
		{"a minute at 30 req/s, then 10", append(repeat(30, 60), repeat(10, 40)...), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 1), nil, Options{Profiles: store})
			spec := rnSpec()
			if _, err := c.Deploy(spec, t0); err != nil {
				t.Fatal(err)
			}
			key := rnKey
			l := Load{Requests: 10, LastRequest: t0.Add(time.Second)}
			c.ObserveLoad(key, l)
			c.Tick(t0.Add(time.Second))
			for i, n := range tt.counts {
				now := t0.Add(time.Duration(i+2) * time.Second)
				tickWith(c, key, &l, n, now)
			}
			if got := c.functions[key].burst.Bursty(); got != tt.bursty {
				t.Errorf("bursty %v, want %v", got, tt.bursty)
			}
		})
	}
}

func repeat(n uint64, k int) []uint64 {
	out := make([]uint64, k)
	for i := range out {
		out[i] = n
	}
	return out
}
