package handlers_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

func invoke(t *testing.T, srv *httptest.Server, path, model string) (http.Header, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("x"))
	if model != "" {
		req.Header.Set(handlers.HeaderModel, model)
	}
	start := time.Now()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s = %d", path, resp.StatusCode)
	}
	return resp.Header, time.Since(start)
}

// TestScaleUpAfterScaleDownReusesTheWarmReplica goes through the HTTP API:
// the replica scaled away keeps its model, and the next scale-up brings the
// same replica back with no model load.
func TestScaleUpAfterScaleDownReusesTheWarmReplica(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	srv := newServerWith(t, local.Config{Profiles: store}, handlers.ProxyOptions{Timeout: 10 * time.Second})
	mustDo(t, srv, "POST", "/system/functions", `{"service":"rn","image":"img","annotations":{"com.openfaas.gpu.model":"resnet18"}}`, 202)
	waitReady(t, srv, "rn")
	h, _ := invoke(t, srv, "/function/rn", "")
	first := h.Get(handlers.HeaderReplica)
	// The replica loaded its model before it was ready (the one miss).
	if h.Get("X-Faas-Gpu-Cache") != "hit" || h.Get("X-Faas-Gpu-Model-Load") != "warm" {
		t.Fatalf("first call: cache %q load %q, want a hit: the model loads before the replica is ready", h.Get("X-Faas-Gpu-Cache"), h.Get("X-Faas-Gpu-Model-Load"))
	}
	mustDo(t, srv, "POST", "/system/scale-function/rn", `{"replicas":0}`, 202)
	var rep scheduler.ClusterReport
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/gpus", "", 200)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Functions[0].Idle != 1 || rep.Cache.Misses != 1 {
		t.Fatalf("after scale to 0: %d warm replicas, %d misses, want 1 and the start-up's 1", rep.Functions[0].Idle, rep.Cache.Misses)
	}
	mustDo(t, srv, "POST", "/system/scale-function/rn", `{"replicas":1}`, 202)
	waitReady(t, srv, "rn")
	h, _ = invoke(t, srv, "/function/rn", "")
	if h.Get(handlers.HeaderReplica) != first {
		t.Fatalf("scale-up landed on %s, want the warm replica %s", h.Get(handlers.HeaderReplica), first)
	}
	if h.Get("X-Faas-Gpu-Cache") != "hit" || h.Get("X-Faas-Gpu-Model-Load") != "warm" {
		t.Fatalf("after scale-up: cache %q load %q, want a hit with no load", h.Get("X-Faas-Gpu-Cache"), h.Get("X-Faas-Gpu-Model-Load"))
	}
	if err := json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/gpus", "", 200)), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Cache.Misses != 1 {
		t.Fatalf("after scale-up: %d misses, want still 1: the warm replica loads nothing", rep.Cache.Misses)
	}
}

type routerRun struct {
	missRatio float64
	meanMs    float64
}

// runSkewedMix sends a Zipf-skewed mix over 35 models to a function with 4
// emulated replicas, each with room for a few models, and measures the
// cache-miss ratio and mean latency the router achieves.
func runSkewedMix(t *testing.T, router handlers.Router) routerRun {
	srv := newServerWith(t, local.Config{
		Emulation: local.Emulation{Latency: time.Millisecond, LoadTime: 100 * time.Millisecond},
	}, handlers.ProxyOptions{Timeout: 10 * time.Second, Router: router, LocalityBound: 2})
	// 1Gi per replica holds 4 models of the default 256Mi: 16 slots for 35 models.
	mustDo(t, srv, "POST", "/system/functions", `{"service":"multi","image":"img","labels":{"com.openfaas.scale.min":"4"},
		"annotations":{"com.openfaas.gpu.sm":"25","com.openfaas.gpu.memory":"1Gi"}}`, 202)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st struct{ AvailableReplicas int }
		_ = json.Unmarshal([]byte(mustDo(t, srv, "GET", "/system/function/multi", "", 200)), &st)
		if st.AvailableReplicas == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("4 replicas never ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	zipf := rand.NewZipf(rng, 1.1, 1, 34)
	const requests, workers = 300, 2
	models := make([]string, requests)
	for i := range models {
		models[i] = fmt.Sprintf("model-%02d", zipf.Uint64())
	}
	var mu sync.Mutex
	misses, total := 0, time.Duration(0)
	var wg sync.WaitGroup
	next := make(chan string)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range next {
				h, d := invoke(t, srv, "/function/multi", m)
				mu.Lock()
				if h.Get("X-Faas-Gpu-Cache") != "hit" {
					misses++
				}
				total += d
				mu.Unlock()
			}
		}()
	}
	for _, m := range models {
		next <- m
	}
	close(next)
	wg.Wait()
	return routerRun{missRatio: float64(misses) / requests, meanMs: float64(total.Microseconds()) / 1000 / requests}
}

func TestLocalityRouterBeatsLeastOutstanding(t *testing.T) {
	lo := runSkewedMix(t, handlers.RouteLeastOutstanding)
	la := runSkewedMix(t, handlers.RouteLocality)
	t.Logf("35 models, 4 replicas, Zipf(1.1) mix, 300 requests from 2 clients: least-outstanding miss %.1f%% mean %.1f ms; locality miss %.1f%% mean %.1f ms",
		100*lo.missRatio, lo.meanMs, 100*la.missRatio, la.meanMs)
	if la.missRatio >= lo.missRatio {
		t.Errorf("locality miss ratio %.3f not below least-outstanding %.3f", la.missRatio, lo.missRatio)
	}
	if la.meanMs >= lo.meanMs {
		t.Errorf("locality mean latency %.1f ms not below least-outstanding %.1f ms", la.meanMs, lo.meanMs)
	}
	if math.IsNaN(la.meanMs) {
		t.Fatal("no latency measured")
	}
}

// The proxy counts a multi-model function's requests by X-Model and the
// model loads its replicas report, for the autoscaler's mix
// (lifecycle.Load.Models, Loads; local.ModelLoadSource).
func TestProxyCountsModelsAndLoads(t *testing.T) {
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	book := handlers.NewLoadBook()
	srv := newServerWith(t, local.Config{Profiles: store, Load: book}, handlers.ProxyOptions{Timeout: 10 * time.Second, Load: book})
	mustDo(t, srv, "POST", "/system/functions", `{"service":"zoo","image":"img","annotations":{"com.openfaas.gpu.model":"resnet18"}}`, 202)
	waitReady(t, srv, "zoo")
	misses := 0
	for _, m := range []string{"resnet18", "resnet34", "resnet18"} {
		if h, _ := invoke(t, srv, "/function/zoo", m); h.Get("X-Faas-Gpu-Cache") != "hit" {
			misses++
		}
	}
	models, loads := book.Models(handlers.DefaultNamespace, "zoo")
	if models["resnet18"] != 2 || models["resnet34"] != 1 || len(models) != 2 {
		t.Errorf("requests by model %v, want resnet18 2, resnet34 1", models)
	}
	if loads != uint64(misses) || misses == 0 {
		t.Errorf("%d loads counted, %d responses said a load (miss or node-hit)", loads, misses)
	}
}
