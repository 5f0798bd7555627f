package lifecycle

import (
	"slices"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// A multi-model function's replicas are told to load the models of its
// mix into the room their slices have free, one load at a time each, so
// that its requests find them held; a load not seen through is told again
// only after its deadline. A function of one model, or whose replicas
// have room for their first model alone, is told nothing.
func TestReplicasLoadTheMixIntoTheirRoom(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	mix := []string{"alexnet", "resnet18", "mobilenet_v2", "vgg16"}
	tests := []struct {
		name   string
		models []string // what the requests name; nil: no X-Model
		memory int64
		loads  bool
	}{
		{"a mix with room: its models are placed", mix, 16 << 30, true},
		{"one model: nothing", nil, 16 << 30, false},
		{"room for the first model alone: nothing", mix, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 8), cache.New(cache.DefaultOptions), Options{Profiles: store})
			spec := scheduler.Function{
				Deployment: types.FunctionDeployment{Service: "zoo", Namespace: "openfaas-fn", Image: "x"},
				GPU:        gpu.Request{Model: "alexnet", SLO: 5 * time.Second, MemoryBytes: tt.memory},
				Scale:      scheduler.ScalePolicy{Min: 1, Max: 1},
			}
			res, err := c.Deploy(spec, t0)
			if err != nil {
				t.Fatal(err)
			}
			key := Key("openfaas-fn", "zoo")
			var id string
			for _, ef := range res.Effects {
				if ef.Kind == Start {
					id = ef.Replica.ID
					c.ReplicaReady(id, t0)
				}
			}
			if id == "" {
				t.Fatal("no replica started")
			}
			fn := c.functions[key]
			c.cache.SetCapacity(id, fn.plan.ModelRoom(fn.plan.Request.MemoryBytes))
			c.cache.Preload(id, "alexnet", fn.plan.Profile.ModelSizeBytes, t0)
			l := Load{}
			if tt.models != nil {
				l.Models = map[string]uint64{}
			}
			var told []Effect
			var pending *Effect
			var toldAt time.Time
			for s := 1; s <= 60; s++ {
				now := t0.Add(time.Duration(s) * time.Second)
				l.Requests += 20
				for _, m := range tt.models {
					l.Models[m] += 5
				}
				l.LastRequest = now
				c.ObserveLoad(key, l)
				for _, ef := range c.Tick(now).Effects {
					if ef.Kind != LoadModel {
						continue
					}
					// The first load is never seen through: it may be told
					// again once its deadline passed, not before.
					if pending != nil && !(len(told) == 1 && ef.Model == pending.Model && now.Sub(toldAt) >= loadGrace) {
						t.Fatalf("at %ds: told to load %s while %s loads", s, ef.Model, pending.Model)
					}
					if ef.Replica.ID != id || !slices.Contains(tt.models, ef.Model) || ef.ModelBytes <= 0 {
						t.Fatalf("at %ds: told %+v", s, ef)
					}
					told = append(told, ef)
					pending, toldAt = &told[len(told)-1], now
				}
				// The others load within the second.
				if pending != nil && len(told) > 1 && c.cache.Fill(id, pending.Model, pending.ModelBytes, now) {
					pending = nil
				}
			}
			if !tt.loads {
				if len(told) > 0 {
					t.Fatalf("told %d loads, want none", len(told))
				}
				return
			}
			for _, m := range mix {
				if !c.cache.Holds(id, m) {
					t.Errorf("%s not held after a minute (told %d loads)", m, len(told))
				}
			}
			if len(told) < 2 || told[1].Model != told[0].Model {
				t.Fatalf("the load given up on was not told again first: %v", told)
			}
		})
	}
}
