package local

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A load the core asks of a replica (lifecycle.LoadModel) reaches it as
// POST /_/models, and its answer reaches the cache: the model is held
// with no request for it. A replica without room keeps what it held, and
// one that does not speak the protocol is not asked again.
func TestReplicasLoadModelsInTheirIdleTime(t *testing.T) {
	tests := []struct {
		name string
		// env, for a process replica (httpfn); nil: an emulated worker.
		env     map[string]string
		holds   bool   // the model, once the load is through
		logged  string // the backend's line once the load is through
		noLoads bool   // not asked again
		outcome string // counted (faas_gpu_idle_model_loads_total)
	}{
		{name: "an emulated worker", holds: true, logged: "model loaded in idle time", outcome: scheduler.IdleLoadDone},
		{name: "a process that speaks", env: map[string]string{"HTTPFN_MODELS": "fn"}, holds: true, logged: "model loaded in idle time", outcome: scheduler.IdleLoadDone},
		{name: "a process with no room", env: map[string]string{"HTTPFN_MODELS": "fn", "HTTPFN_ROOM": "1"}, logged: "model not loaded", outcome: scheduler.IdleLoadNoRoom},
		{name: "a process that does not speak", env: map[string]string{}, logged: "replica takes no model loads in its idle time", noLoads: true, outcome: scheduler.IdleLoadNotSpoken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			b, err := New(Config{StateDir: t.TempDir(), Inventory: gpu.BuiltinInventory("node-a"),
				Emulation: Emulation{Latency: time.Millisecond, LoadTime: 20 * time.Millisecond}, Load: handlers.NewLoadBook(), Log: zap.New(core)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(context.Background())
			spec := fnSpec("fn", 30, 2<<30)
			if tt.env != nil {
				spec = asHTTPFn(t, spec, tt.env)
			}
			if err := b.Deploy(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			var r *replica
			eventually(t, 10*time.Second, "a ready replica", func() bool {
				b.mu.Lock()
				defer b.mu.Unlock()
				for _, x := range b.running {
					if x.run.Ready() {
						r = x
						return true
					}
				}
				return false
			})
			if b.cache.Holds(r.id, "vgg16") {
				t.Fatal("vgg16 held before any load")
			}
			b.mu.Lock()
			err = b.applyLocked(lifecycle.Result{Effects: []lifecycle.Effect{{Kind: lifecycle.LoadModel, Function: r.fn,
				Replica: lifecycle.ReplicaView{ID: r.id}, Model: "vgg16", ModelBytes: 64 << 20}}}, time.Now())
			b.mu.Unlock()
			if err != nil {
				t.Fatal(err)
			}
			// The provider logs before it fills the cache: its side is
			// through once the outcome is counted and, for a load, the
			// cache holds the model.
			eventually(t, 10*time.Second, tt.logged, func() bool {
				return logs.FilterMessage(tt.logged).Len() > 0 && b.stats.Stats().IdleLoads[tt.outcome] > 0 &&
					(!tt.holds || b.cache.Holds(r.id, "vgg16"))
			})
			if got := b.cache.Holds(r.id, "vgg16"); got != tt.holds {
				t.Errorf("holds vgg16 after the load: %v, want %v", got, tt.holds)
			}
			if !b.cache.Holds(r.id, "fn") {
				t.Error("its own model was evicted for the load")
			}
			if got := r.takesNoLoads.Load(); got != tt.noLoads {
				t.Errorf("takes no loads: %v, want %v", got, tt.noLoads)
			}
			if got := b.stats.Stats().IdleLoads; len(got) != 1 || got[tt.outcome] != 1 {
				t.Errorf("idle loads counted %v, want one %s", got, tt.outcome)
			}
		})
	}
}

// An emulated worker's side of the protocol: a load takes its time beside
// the requests, and what no longer fits is refused, not evicted for.
func TestEmulatedWorkerTakesLoads(t *testing.T) {
	fits := func(m string) (time.Duration, func() ([]string, bool)) {
		return 10 * time.Millisecond, func() ([]string, bool) { return []string{"own", m}, true }
	}
	full := func(string) (time.Duration, func() ([]string, bool)) {
		return 0, func() ([]string, bool) { return []string{"own"}, false }
	}
	tests := []struct {
		name   string
		fill   func(string) (time.Duration, func() ([]string, bool))
		body   string
		status int
		models []string // listed after
	}{
		{name: "fits", fill: fits, body: `{"model": "vgg16"}`, status: http.StatusOK, models: []string{"own", "vgg16"}},
		{name: "no room", fill: full, body: `{"model": "vgg16"}`, status: http.StatusInsufficientStorage, models: []string{"own"}},
		{name: "no model named", fill: fits, body: `{}`, status: http.StatusBadRequest, models: []string{"own"}},
		{name: "takes no loads", body: `{"model": "vgg16"}`, status: http.StatusNotImplemented, models: []string{"own"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			serve := func(string) Service { return Service{Outcome: "miss", Resident: []string{"own"}} }
			spec := ReplicaSpec{ID: "r1", Function: "fn", Emulation: Emulation{Model: "own", Serve: serve}, Fill: tt.fill}
			run := newEmulatedRunner(spec, func(string, string) {}, zap.NewNop())
			startRunner(t, run)
			defer run.Stop(context.Background())
			resp, err := http.Post(run.URL()+modelsPath, "application/json", strings.NewReader(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := getModels(t, run.URL()); !reflect.DeepEqual(got, tt.models) {
				t.Errorf("listed after: %q, want %q", got, tt.models)
			}
		})
	}
}

// The whole way in local mode: a multi-model function's requests name
// models its replica never served (counted as the proxy counts them), and
// its ticks have the replica load them in its idle time, through POST
// /_/models to the emulated worker, which takes each load's profiled
// time: the cache ends up holding them with no request routed to it.
func TestMultiModelReplicaLoadsItsMixWhileIdle(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	spec := modelSpec("zoo", "alexnet", 2*time.Second)
	spec.GPU.MemoryBytes = 8 << 30
	spec.Scale.Min, spec.Scale.Max = 1, 1
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	mix := []string{"alexnet", "resnet18", "mobilenet_v2"}
	book := b.cfg.Load.(*handlers.LoadBook)
	t0 := time.Now()
	var id string
	eventually(t, 10*time.Second, "the replica holds the mix", func() bool {
		now := time.Now()
		for _, m := range mix {
			book.Request(DefaultNamespace, "zoo", now)
			book.RequestModel(DefaultNamespace, "zoo", m)
		}
		b.Tick(now)
		eps, err := readyEndpoints(b, DefaultNamespace, "zoo")
		if err != nil || len(eps) != 1 {
			return false
		}
		id = eps[0].ID
		for _, m := range mix {
			if !b.Holds(id, m) {
				return false
			}
		}
		return true
	})
	got := b.cache.Models(id)
	t.Logf("after %s: %s holds %v", time.Since(t0).Round(time.Millisecond), id, got)
	if s := b.cache.Stats(); s.Misses+s.NodeHits > 1 {
		// The start-up load of alexnet is the one request-free load the
		// cache counts; the loads in idle time count none.
		t.Errorf("cache counted %d misses and %d node hits: the loads were not in idle time", s.Misses, s.NodeHits)
	}
}

// The proxy weighs a busy holder against a load by the model's profiled
// load time (handlers.ModelLoadTimer), which the backend knows.
func TestBackendKnowsModelLoadTimes(t *testing.T) {
	b := newProfiledBackend(t)
	prof, _, ok := builtinProfiles(t).Lookup("resnet50", b.product)
	if !ok || prof.LoadTime <= 0 {
		t.Fatal("no resnet50 profile with a load time")
	}
	if got := b.ModelLoadSeconds("resnet50"); got != prof.LoadTime.Seconds() {
		t.Errorf("resnet50: %v s, want %v", got, prof.LoadTime.Seconds())
	}
	if got := b.ModelLoadSeconds("no-such-model"); got != 0 {
		t.Errorf("an unprofiled model: %v s, want 0", got)
	}
}
