package lifecycle

import (
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// A multi-model function is planned from its first model (alexnet, fast)
// but its requests name others: its capacity comes from the mix they
// name, and the time its replicas spend loading models is demand.
func TestMultiModelCapacityFollowsTheMix(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// shares of the 100 req/s by model; loads per request
		shares   map[string]float64
		loads    float64
		min, max int // replicas in service after 30 s
	}{
		{"its first model alone: one replica", map[string]float64{"alexnet": 1}, 0, 1, 1},
		{"heavy models named: more replicas than the first model needs", map[string]float64{"alexnet": 0.1, "densenet201": 0.45, "efficientnet_v2_l": 0.45}, 0, 2, 16},
		{"loads are demand: more replicas again", map[string]float64{"alexnet": 0.1, "densenet201": 0.45, "efficientnet_v2_l": 0.45}, 0.05, 3, 16},
	}
	var counts []int
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(2, 8), nil, Options{Profiles: store})
			spec := scheduler.Function{
				Deployment: types.FunctionDeployment{Service: "zoo", Namespace: "openfaas-fn", Image: "x"},
				GPU:        gpu.Request{Model: "alexnet", SLO: 300 * time.Millisecond, MemoryBytes: 16 << 30},
				Scale:      scheduler.ScalePolicy{Min: 1, Max: 16, ZeroDuration: time.Minute},
			}
			if _, err := c.Deploy(spec, t0); err != nil {
				t.Fatal(err)
			}
			key := Key("openfaas-fn", "zoo")
			l := Load{Models: map[string]uint64{}}
			for s := 1; s <= 30; s++ {
				now := t0.Add(time.Duration(s) * time.Second)
				l.Requests += 100
				for m, sh := range tt.shares {
					l.Models[m] += uint64(100 * sh)
				}
				l.Loads = uint64(float64(l.Requests) * tt.loads)
				l.LastRequest = now
				c.ObserveLoad(key, l)
				c.Tick(now)
			}
			v, _ := c.Function(key)
			n := len(v.Live)
			counts = append(counts, n)
			if n < tt.min || n > tt.max {
				t.Errorf("%d replicas, want %d to %d", n, tt.min, tt.max)
			}
			if k := len(counts); k > 1 && n <= counts[k-2] {
				t.Errorf("%d replicas, no more than the case before (%d)", n, counts[k-2])
			}
		})
	}
}
