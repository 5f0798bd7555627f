package k8s

import (
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// TestRisePassScalesBetweenTicks: the leader's Rise pass (every
// -rise-interval between ticks, as in local mode) adds replicas for a
// burst a quarter of a second old, and a steady rate adds none. Before,
// the Kubernetes loop ran only the tick and a burst waited for it.
func TestRisePassScalesBetweenTicks(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		next  uint64 // requests in the 250 ms after 20 s at 120 req/s
		added bool
	}{
		{"steady", 30, false},
		{"a burst to 300 req/s", 75, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newState(cluster2x2(), coreOptions(store, scheduler.AutoscaleOptions{Headroom: 1.2, CoolDown: 10 * time.Second}), nil)
			f := scheduler.Function{
				Deployment: types.FunctionDeployment{Service: "rn", Image: "img", Namespace: "ns"},
				GPU:        gpu.Request{Model: "resnet50", SLO: 100 * time.Millisecond},
				Scale:      scheduler.ScalePolicy{Min: 1, Max: 20, ZeroDuration: time.Minute},
			}
			t0 := time.Now()
			mustDeploy(t, st, f, t0)
			k := fnKey("ns", "rn")
			var requests uint64
			load := func(string) lifecycle.Load { return lifecycle.Load{Requests: requests, LastRequest: t0} }
			now := t0
			for s := 1; s <= 20; s++ {
				requests += 120
				now = t0.Add(time.Duration(s) * time.Second)
				st.tick(now, load, false)
			}
			before, _ := st.core.Function(k)
			requests += tt.next
			st.tick(now.Add(250*time.Millisecond), load, true)
			after, _ := st.core.Function(k)
			if got := len(after.Live) > len(before.Live); got != tt.added {
				t.Fatalf("%d replicas -> %d after %d requests in 250 ms (%q), want added %v", len(before.Live), len(after.Live), tt.next, after.LastScale, tt.added)
			}
		})
	}
}

type fakeShare struct{ reporting bool }

func (fakeShare) Load(string, string) (uint64, time.Time, int) { return 0, time.Time{}, 0 }
func (f fakeShare) Reporting() bool                            { return f.reporting }

// The leader leaves the rise pass out while standbys report: their
// requests arrive in lumps once a tick, which a 250-ms pass would read as
// rises.
func TestRiseLeftOutWhileStandbysReport(t *testing.T) {
	tests := []struct {
		name string
		load LoadSource
		want bool
	}{
		{"no proxy counts", nil, true},
		{"one instance", fakeShare{reporting: false}, true},
		{"standbys reporting", fakeShare{reporting: true}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Backend{cfg: Config{Load: tt.load}}
			if got := b.riseAllowed(); got != tt.want {
				t.Errorf("riseAllowed = %v, want %v", got, tt.want)
			}
		})
	}
}
