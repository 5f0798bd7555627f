// Command httpfn is a tiny of-watchdog mode=http function used by the tests
// of package local and by end-to-end tests. It needs only the standard
// library so that tests can build it with a plain `go build`.
//
//	GET  /env/NAME   the value of env var NAME
//	     /crash      exits with code 3
//	     /slow?ms=N  sleeps N ms, then answers
//	     anything    echoes the body, with X-Path and X-Query set
//
// HTTPFN_MODELS, when set, makes it speak the replica protocol
// (docs/replica-protocol.md): it holds those models (comma-separated) at
// start, loads the one a request names in X-Model, answers GET /_/models
// and adds X-Faas-Gpu-Models to every response, and takes POST /_/models
// {"model": NAME}, a load in its idle time: the model is held least
// recently used, beside the others, and the answer is the list; with
// HTTPFN_ROOM=N it holds at most N models that way, answering 507 beyond.
// Unset, /_/models is 404.
//
// FAAS_GPU_PARKED=1 starts it parked (docs/replica-protocol.md, "Parked
// processes"): GET /_/gpu answers 200 while it waits and every other
// request 503; POST /_/gpu {"env": {...}} sets those variables, unsets
// FAAS_GPU_PARKED and answers 200, after HTTPFN_HANDOVER_MS as a model's
// load would take; from then on it serves, and /_/gpu is 404.
// HTTPFN_HANDOVER_FAIL makes that POST answer 500 with its text instead.
//
// HTTPFN_IGNORE_TERM=1 makes it ignore SIGTERM, to test forced stops.
// HTTPFN_UNREADY makes /_/health answer 503 with its text.
// HTTPFN_TERM_MESSAGE makes it print that line on SIGTERM, then exit 0, as a
// function that reports its shutdown does.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if os.Getenv("HTTPFN_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	} else if msg := os.Getenv("HTTPFN_TERM_MESSAGE"); msg != "" {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() {
			<-term
			fmt.Println(msg)
			os.Exit(0)
		}()
	}
	port := firstEnv("port", "PORT", "http_port")
	if port == "" {
		port = "8080"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		fmt.Fprintf(os.Stderr, "httpfn: listen: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("httpfn listening on %s\n", port)
	if err := http.Serve(ln, http.HandlerFunc(handle)); err != nil {
		fmt.Fprintf(os.Stderr, "httpfn: serve: %v\n", err)
		os.Exit(1)
	}
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// held is what the function holds in "GPU memory", most recent first; nil
// when it does not speak the protocol.
var held = newHeld()

type heldModels struct {
	mu     sync.Mutex
	models []string
}

func newHeld() *heldModels {
	v, ok := os.LookupEnv("HTTPFN_MODELS")
	if !ok {
		return nil
	}
	h := &heldModels{models: []string{}}
	for _, m := range strings.Split(v, ",") {
		if m = strings.TrimSpace(m); m != "" {
			h.models = append(h.models, m)
		}
	}
	return h
}

// use moves model to the front, loading it if absent, and lists them all.
func (h *heldModels) use(model string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if model != "" {
		out := []string{model}
		for _, m := range h.models {
			if m != model {
				out = append(out, m)
			}
		}
		h.models = out
	}
	return append([]string(nil), h.models...)
}

// fill holds model beside the others, least recently used, where
// HTTPFN_ROOM allows (ok false: no room), and lists them all.
func (h *heldModels) fill(model string) (models []string, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.models {
		if m == model {
			return append([]string(nil), h.models...), true
		}
	}
	if room, err := strconv.Atoi(os.Getenv("HTTPFN_ROOM")); err == nil && len(h.models) >= room {
		return append([]string(nil), h.models...), false
	}
	h.models = append(h.models, model)
	return append([]string(nil), h.models...), true
}

// writeModels answers with the protocol's list.
func writeModels(w http.ResponseWriter, models []string) {
	type entry struct {
		Name string `json:"name"`
	}
	list := struct {
		Models []entry `json:"models"`
	}{Models: []entry{}}
	for _, m := range models {
		list.Models = append(list.Models, entry{m})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// parked is set while it waits for its GPU settings.
var parked atomic.Bool

// HTTPFN_UNPARKABLE makes it a server that does not speak the protocol:
// it starts as a replica whatever FAAS_GPU_PARKED says, and /_/gpu is 404.
func init() {
	parked.Store(os.Getenv("FAAS_GPU_PARKED") == "1" && os.Getenv("HTTPFN_UNPARKABLE") == "")
}

// handOver serves /_/gpu: the parked process's side of the protocol.
func handOver(w http.ResponseWriter, r *http.Request) {
	switch {
	case !parked.Load():
		http.NotFound(w, r)
	case r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"parked":true}`)
	case r.Method == http.MethodPost:
		var body struct {
			Env map[string]string `json:"env"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "env: "+err.Error(), http.StatusBadRequest)
			return
		}
		for k, v := range body.Env {
			_ = os.Setenv(k, v)
		}
		_ = os.Unsetenv("FAAS_GPU_PARKED")
		if why := os.Getenv("HTTPFN_HANDOVER_FAIL"); why != "" {
			http.Error(w, why, http.StatusInternalServerError)
			return
		}
		ms, _ := strconv.Atoi(os.Getenv("HTTPFN_HANDOVER_MS"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		parked.Store(false)
		fmt.Fprintln(w, "serving")
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

func handle(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(os.Stderr, "httpfn %s %s\n", r.Method, r.URL.RequestURI())
	if r.URL.Path == "/_/gpu" {
		handOver(w, r)
		return
	}
	if parked.Load() {
		http.Error(w, "parked: waiting for GPU settings", http.StatusServiceUnavailable)
		return
	}
	// HTTPFN_UNREADY makes /_/health answer 503 with that text, as a
	// function that cannot load its model does.
	if why := os.Getenv("HTTPFN_UNREADY"); why != "" && r.URL.Path == "/_/health" {
		http.Error(w, why, http.StatusServiceUnavailable)
		return
	}
	if held != nil && r.URL.Path == "/_/models" && r.Method == http.MethodPost {
		var ask struct {
			Model string `json:"model"`
		}
		if err := json.NewDecoder(r.Body).Decode(&ask); err != nil || ask.Model == "" {
			http.Error(w, `want {"model": NAME}`, http.StatusBadRequest)
			return
		}
		models, ok := held.fill(ask.Model)
		if !ok {
			http.Error(w, "no room for "+ask.Model, http.StatusInsufficientStorage)
			return
		}
		writeModels(w, models)
		return
	}
	if held != nil {
		models := held.use(r.Header.Get("X-Model"))
		w.Header().Set("X-Faas-Gpu-Models", strings.Join(models, ","))
		if r.URL.Path == "/_/models" {
			writeModels(w, models)
			return
		}
	}
	switch {
	case r.URL.Path == "/_/models":
		http.NotFound(w, r)
	case strings.HasPrefix(r.URL.Path, "/env/"):
		fmt.Fprint(w, os.Getenv(strings.TrimPrefix(r.URL.Path, "/env/")))
	case r.URL.Path == "/crash":
		os.Exit(3)
	case r.URL.Path == "/slow":
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "slept %d ms", ms)
	default:
		w.Header().Set("X-Path", r.URL.Path)
		w.Header().Set("X-Query", r.URL.RawQuery)
		if ct := r.Header.Get("Content-Type"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		_, _ = io.Copy(w, r.Body)
	}
}
