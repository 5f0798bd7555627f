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
			key := deployZoo(t, c, "alexnet", 300*time.Millisecond, 16<<30, 16, time.Minute)
			serveMix(c, key, 30, 100, tt.shares, tt.loads)
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

// A multi-model function whose replicas' memory holds its models only
// two at a time is not scaled down below two in service, where a light
// mix that one replica holds is: below it, the replica left would load
// the removed one's models while their requests wait. Nor merged below
// it: one new replica in place of two starts with one model and has half
// their room (zoo9's zi13: two 8-GiB replicas of six heavy models merged
// at 34 req/s, then 25 s of model loads in which most requests missed).
func TestMultiModelScaleDownKeepsItsModelsResident(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	// 7.6 GiB of models against 6.6 GiB of room in an 8 GiB replica.
	heavy := []string{"regnet_y_128gf", "convnext_large", "vgg19_bn", "vgg16_bn", "regnet_y_32gf"}
	tests := []struct {
		name      string
		models    []string
		wantFloor bool // the mix needs more than one replica's memory
	}{
		{"heavy models fill more than one replica", heavy, true},
		{"light models fit in one", []string{"alexnet", "resnet18", "mobilenet_v2"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(2, 8), nil, Options{Profiles: store})
			key := deployZoo(t, c, tt.models[0], 5*time.Second, 8<<30, 16, time.Hour)
			l := Load{Models: map[string]uint64{}}
			peak, last := 0, 0
			for s := 1; s <= 300; s++ {
				now := t0.Add(time.Duration(s) * time.Second)
				rate := uint64(600) // busy for a minute, then a trickle
				if s > 60 {
					rate = 3
				}
				l.Requests += rate
				for _, m := range tt.models {
					l.Models[m] += rate / uint64(len(tt.models))
				}
				l.LastRequest = now
				c.ObserveLoad(key, l)
				c.Tick(now)
				// Every replica, the deploy's first too: a resize waits
				// for all of a pool to be ready, and with that one left
				// starting this never saw a merge below the floor.
				readyAll(c, now)
				v, _ := c.Function(key)
				last = len(v.Live)
				peak = max(peak, last)
			}
			room := c.functions[key].modelRoom()
			var shares []scheduler.ModelShare
			for _, m := range tt.models {
				p, _, _ := store.Lookup(m, c.functions[key].plan.Profile.GPU)
				shares = append(shares, scheduler.ModelShare{Profile: p, Share: 1})
			}
			floor := scheduler.CacheFloor(shares, room, 0)
			if (floor > 1) != tt.wantFloor {
				t.Fatalf("the mix needs %d replicas' memory; the case wants more than one: %v", floor, tt.wantFloor)
			}
			if peak < 2 {
				t.Fatalf("peaked at %d replicas in service: the busy minute should need more than one", peak)
			}
			if want := max(floor, 1); last != want {
				t.Errorf("%d replicas in service after the trickle, want %d (peak %d)", last, want, peak)
			}
		})
	}
}

// The capacity started ahead of a multi-model function's burst starts
// earlier by the loads that fill a new replica's room with the mix
// (burstLead): its warm model caches yield once the period is known, and
// what starts in their place serves the burst's mix only once it holds
// their models. A function of one model starts a start-up ahead.
func TestBurstLeadCountsTheCacheFill(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	shares := map[string]float64{"alexnet": 0.5, "resnet50": 0.3, "densenet121": 0.2}
	tests := []struct {
		name   string
		models map[string]float64 // nil: requests name no model
		fill   bool
	}{
		{"one model: a start-up and the margin", nil, false},
		{"three models: and the loads of the two after the first", shares, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(inventory(1, 2), nil, Options{Profiles: store})
			key := deployZoo(t, c, "alexnet", 300*time.Millisecond, 8<<30, 4, time.Minute)
			serveMix(c, key, 10, 50, tc.models, 0)
			fn := c.functions[key]
			want := fn.startup + burstLeadMargin
			if tc.fill {
				// alexnet, the most requested, loads in the start-up; the
				// 8 GiB replica's room holds the other two.
				for _, m := range []string{"resnet50", "densenet121"} {
					p, _, _ := store.Lookup(m, fn.plan.Profile.GPU)
					want += p.LoadTime
				}
			}
			if got := fn.burstLead(); got != want {
				t.Errorf("burstLead = %s, want %s", got, want)
			}
		})
	}
}

// deployZoo deploys the function zoo, planned from model, at t0, and
// returns its key: the multi-model function these tests name models of.
func deployZoo(t *testing.T, c *Core, model string, slo time.Duration, memory int64, max int, zeroAfter time.Duration) string {
	t.Helper()
	spec := scheduler.Function{
		Deployment: types.FunctionDeployment{Service: "zoo", Namespace: "openfaas-fn", Image: "x"},
		GPU:        gpu.Request{Model: model, SLO: slo, MemoryBytes: memory},
		Scale:      scheduler.ScalePolicy{Min: 1, Max: max, ZeroDuration: zeroAfter},
	}
	if _, err := c.Deploy(spec, t0); err != nil {
		t.Fatal(err)
	}
	return Key("openfaas-fn", "zoo")
}

// serveMix has key's function serve rate requests a second for its first
// seconds after t0, shares of them naming each model and loads model
// loads per request, a tick each second.
func serveMix(c *Core, key string, seconds int, rate uint64, shares map[string]float64, loads float64) {
	l := Load{Models: map[string]uint64{}}
	for s := 1; s <= seconds; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		l.Requests += rate
		for m, sh := range shares {
			l.Models[m] += uint64(float64(rate) * sh)
		}
		l.Loads = uint64(float64(l.Requests) * loads)
		l.LastRequest = now
		c.ObserveLoad(key, l)
		c.Tick(now)
	}
}
