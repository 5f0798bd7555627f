package profiler

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openfaas/faas-provider/types"
)

const fakeProduct = "Fake GPU 16GB"

// fakeProvider is the slice of the faas-gpu provider API the profiler
// uses, in memory: functions answer after work × 100 / sm, one at a time
// like a GPU slice.
type fakeProvider struct {
	t      *testing.T
	srv    *httptest.Server
	work   time.Duration
	noGPUs bool // answer 404 on /system/gpus, as a gateway does
	user   string
	pass   string

	// hooks, set before use
	onInvoke   func(name string) int // status to answer; 0: 200
	productFor func(name string) string

	mu        sync.Mutex
	functions map[string]types.FunctionDeployment // by name (one namespace)
	locks     map[string]*sync.Mutex              // one slice per function
	deployed  []types.FunctionDeployment          // every deploy, in order
	deleted   []string
	invokes   atomic.Int64
}

func newFakeProvider(t *testing.T) *fakeProvider {
	f := &fakeProvider{t: t, work: time.Millisecond, functions: map[string]types.FunctionDeployment{}, locks: map[string]*sync.Mutex{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /system/function/{name}", f.auth(f.status))
	mux.HandleFunc("POST /system/functions", f.auth(f.deploy))
	mux.HandleFunc("DELETE /system/functions", f.auth(f.delete))
	mux.HandleFunc("GET /system/gpus", f.auth(f.gpus))
	mux.HandleFunc("POST /function/{target}", f.invoke)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProvider) client(t *testing.T) *Client {
	c, err := NewClient(f.srv.URL, f.user, f.pass, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func (f *fakeProvider) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if f.user != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != f.user || p != f.pass {
				http.Error(w, "Unauthorized", http.StatusUnauthorized)
				return
			}
		}
		h(w, r)
	}
}

func (f *fakeProvider) add(dep types.FunctionDeployment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if dep.Namespace == "" {
		dep.Namespace = "openfaas-fn"
	}
	f.functions[dep.Service] = dep
	f.locks[dep.Service] = &sync.Mutex{}
}

func (f *fakeProvider) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.functions {
		out = append(out, n)
	}
	return out
}

func (f *fakeProvider) deployments() []types.FunctionDeployment {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deployed)
}

func (f *fakeProvider) deletedNames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.deleted)
}

func (f *fakeProvider) status(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	dep, ok := f.functions[r.PathValue("name")]
	f.mu.Unlock()
	if !ok {
		http.Error(w, "function not found", http.StatusNotFound)
		return
	}
	st := types.FunctionStatus{Name: dep.Service, Image: dep.Image, Namespace: dep.Namespace, EnvProcess: dep.EnvProcess,
		EnvVars: dep.EnvVars, Constraints: dep.Constraints, Secrets: dep.Secrets, Labels: dep.Labels, Annotations: dep.Annotations,
		Limits: dep.Limits, Requests: dep.Requests, Replicas: 1, AvailableReplicas: 1}
	_ = json.NewEncoder(w).Encode(st)
}

func (f *fakeProvider) deploy(w http.ResponseWriter, r *http.Request) {
	var dep types.FunctionDeployment
	if err := json.NewDecoder(r.Body).Decode(&dep); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	_, exists := f.functions[dep.Service]
	f.deployed = append(f.deployed, dep)
	f.mu.Unlock()
	if exists {
		http.Error(w, "exists", http.StatusConflict)
		return
	}
	f.add(dep)
	w.WriteHeader(http.StatusAccepted)
}

func (f *fakeProvider) delete(w http.ResponseWriter, r *http.Request) {
	var req types.DeleteFunctionRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.functions[req.FunctionName]; !ok {
		http.Error(w, "function not found", http.StatusNotFound)
		return
	}
	delete(f.functions, req.FunctionName)
	f.deleted = append(f.deleted, req.FunctionName)
	w.WriteHeader(http.StatusAccepted)
}

func (f *fakeProvider) gpus(w http.ResponseWriter, r *http.Request) {
	if f.noGPUs {
		http.NotFound(w, r)
		return
	}
	type rep struct {
		Function  string `json:"function"`
		Namespace string `json:"namespace"`
	}
	byProduct := map[string][]rep{}
	for _, n := range f.names() {
		p := fakeProduct
		if f.productFor != nil {
			p = f.productFor(n)
		}
		byProduct[p] = append(byProduct[p], rep{n, "openfaas-fn"})
	}
	type gpu struct {
		Product  string `json:"product"`
		Replicas []rep  `json:"replicas"`
	}
	var gpus []gpu
	for p, reps := range byProduct {
		gpus = append(gpus, gpu{p, reps})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"nodes": []any{map[string]any{"name": "n1", "gpus": gpus}}, "pending": []any{}})
}

func (f *fakeProvider) invoke(w http.ResponseWriter, r *http.Request) {
	f.invokes.Add(1)
	name, _, _ := strings.Cut(r.PathValue("target"), ".")
	f.mu.Lock()
	dep, ok := f.functions[name]
	lock := f.locks[name]
	f.mu.Unlock()
	if !ok {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if f.onInvoke != nil {
		if code := f.onInvoke(name); code != 0 && code != http.StatusOK {
			http.Error(w, "fake failure", code)
			return
		}
	}
	sm := 100
	if dep.Annotations != nil {
		if v, err := strconv.Atoi((*dep.Annotations)[annotationSM]); err == nil {
			sm = v
		}
	}
	lock.Lock()
	time.Sleep(f.work * 100 / time.Duration(sm))
	lock.Unlock()
	fmt.Fprintln(w, "ok")
}
