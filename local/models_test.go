package local

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/gorilla/mux"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// getModels asks a replica GET /_/models; nil for any status but 200.
func getModels(t *testing.T, base string) []string {
	t.Helper()
	resp, err := http.Get(base + modelsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var body struct {
		Models []struct {
			Name string `json:"name"`
		} `json:"models"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, m := range body.Models {
		out = append(out, m.Name)
	}
	return out
}

// An emulated worker speaks the replica protocol: it lists what its
// emulated memory holds and tells it on every response.
func TestEmulatedWorkerReportsItsModels(t *testing.T) {
	tests := []struct {
		name string
		// serve, when set, stands in for the backend's answer from the
		// model cache.
		serve  func(model string) Service
		model  string   // the request's X-Model
		before []string // listed once ready, before any request
		after  []string // listed and in the header after one
	}{
		{name: "plain: the function's model, loaded before ready", before: []string{"own"}, after: []string{"own"}},
		{name: "with the cache: what it said last", model: "vgg16",
			serve: func(m string) Service {
				if m == "own" { // the start-up load
					return Service{Outcome: "miss", Resident: []string{"own"}}
				}
				return Service{Outcome: "miss", Resident: []string{m, "own"}}
			},
			before: []string{"own"}, after: []string{"vgg16", "own"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := ReplicaSpec{ID: "r1", Function: "fn", Emulation: Emulation{Model: "own", Serve: tt.serve}}
			run := newEmulatedRunner(spec, func(string, string) {}, zap.NewNop())
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			defer run.Stop(context.Background())
			if !run.Ready() {
				t.Fatal("not ready after a start with no load time")
			}
			if got := getModels(t, run.URL()); !reflect.DeepEqual(got, tt.before) {
				t.Fatalf("before: %q, want %q", got, tt.before)
			}
			req, _ := http.NewRequest(http.MethodPost, run.URL(), nil)
			req.Header.Set(headerModel, tt.model)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := handlers.ParseModelsHeader(resp.Header.Get(headerModels)); !reflect.DeepEqual(got, tt.after) {
				t.Fatalf("%s = %q, want %q", headerModels, got, tt.after)
			}
			if got := getModels(t, run.URL()); !reflect.DeepEqual(got, tt.after) {
				t.Fatalf("after: %q, want %q", got, tt.after)
			}
		})
	}
}

// What a process replica says it holds, through the provider's proxy,
// replaces the cache's assumption, for routing (Holds) and placement
// (the cache's locality); one that says nothing keeps the assumption.
func TestProcessReplicaModelsReachTheCache(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		// holds and lacks are checked once the replica was asked.
		holds, lacks []string
	}{
		{name: "says nothing: its own model", holds: []string{"talker"}, lacks: []string{"vgg16"}},
		{name: "speaks: what it says", env: map[string]string{"HTTPFN_MODELS": "resnet50"}, holds: []string{"resnet50", "vgg16"}, lacks: []string{"talker"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, t.TempDir())
			defer b.Close(context.Background())
			spec := asHTTPFn(t, fnSpec("talker", 30, 2<<30), tt.env)
			if err := b.Deploy(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			r := mux.NewRouter()
			r.HandleFunc("/function/{name}", handlers.MakeProxyHandler(b, &handlers.Invocations{}, handlers.ProxyOptions{Timeout: 10 * time.Second}, zap.NewNop()))
			srv := httptest.NewServer(r)
			defer srv.Close()
			var id string
			eventually(t, 10*time.Second, "talker answers through the proxy", func() bool {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/function/talker", nil)
				req.Header.Set(handlers.HeaderModel, "vgg16")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return false
				}
				resp.Body.Close()
				if _, leaked := resp.Header[handlers.HeaderModels]; leaked {
					t.Fatalf("the caller got %s", handlers.HeaderModels)
				}
				id = resp.Header.Get(handlers.HeaderReplica)
				return resp.StatusCode == http.StatusOK
			})
			eventually(t, 10*time.Second, "the cache agrees with the replica", func() bool {
				for _, m := range tt.holds {
					if !b.Holds(id, m) {
						return false
					}
				}
				for _, m := range tt.lacks {
					if b.Holds(id, m) {
						return false
					}
				}
				return true
			})
			// Placement's view: the GPU of the replica holds what it said.
			loc := b.cache.Where(tt.holds[0], time.Now())
			if len(loc.GPUs) != 1 {
				t.Fatalf("%s is on GPUs %v, want the replica's one", tt.holds[0], loc.GPUs)
			}
		})
	}
}

// What a replica says its model load took shows in /system/gpus, so the
// cost of a cold start is visible where it is paid: an emulated worker
// says the load it emulates.
func TestReplicaModelLoadTimeShowsInTheReport(t *testing.T) {
	const load = 150 * time.Millisecond
	b, err := New(Config{StateDir: t.TempDir(), Inventory: gpu.BuiltinInventory("node-a"), Emulation: Emulation{Latency: time.Millisecond, LoadTime: load},
		Load: handlers.NewLoadBook(), Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	if err := b.Deploy(context.Background(), fnSpec("loader", 30, 2<<30)); err != nil {
		t.Fatal(err)
	}
	r := mux.NewRouter()
	r.HandleFunc("/function/{name}", handlers.MakeProxyHandler(b, &handlers.Invocations{}, handlers.ProxyOptions{Timeout: 10 * time.Second}, zap.NewNop()))
	srv := httptest.NewServer(r)
	defer srv.Close()
	eventually(t, 10*time.Second, "loader answers through the proxy", func() bool {
		resp, err := http.Post(srv.URL+"/function/loader", "text/plain", nil)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	var got map[string]float64
	eventually(t, 10*time.Second, "the report has the replica's load time", func() bool {
		// The load happened at the first request, after the ask at ready:
		// the header's new list draws another ask within a second.
		if resp, err := http.Post(srv.URL+"/function/loader", "text/plain", nil); err == nil {
			resp.Body.Close()
		}
		rep, err := b.GPUReport(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range rep.Nodes {
			for _, g := range n.GPUs {
				for _, rr := range g.Replicas {
					if rr.Function == "loader" && rr.ModelLoadSeconds != nil {
						got = rr.ModelLoadSeconds
						return true
					}
				}
			}
		}
		return false
	})
	if want := map[string]float64{"loader": load.Seconds()}; !reflect.DeepEqual(got, want) {
		t.Errorf("modelLoadSeconds = %v, want %v", got, want)
	}
}

// An emulated worker with a profile logs the load it takes, not the
// -emulated-load-time fallback it is also given: its "replica is emulated"
// line said 0.2 s where the replica slept the profile's 1.22 s.
func TestEmulatedWorkerLogsTheLoadItTakes(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	load := 30 * time.Millisecond
	spec := ReplicaSpec{ID: "r1", Function: "fn", Emulation: Emulation{Model: "own", LoadTime: 200 * time.Millisecond,
		Serve: func(string) Service { return Service{Outcome: "miss", Load: load, Resident: []string{"own"}} }}}
	run := newEmulatedRunner(spec, func(string, string) {}, zap.New(core))
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer run.Stop(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for !run.Ready() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	for _, e := range logs.FilterMessage("replica is emulated").All() {
		if v, ok := e.ContextMap()["loadTime"]; ok && v != "profiled" {
			t.Errorf("replica is emulated: loadTime %v, want profiled (the fallback is not what it takes)", v)
		}
	}
	loaded := logs.FilterMessage("model loaded").All()
	if len(loaded) != 1 || loaded[0].ContextMap()["loadTime"] != load {
		t.Fatalf("model loaded logs %v, want one with loadTime %s", loaded, load)
	}
}
