package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/internal/modelload"
	"go.uber.org/zap"
)

// Response headers of in-process replicas, so that callers (and tests) can
// tell which replica answered and whether it paid a model load.
const (
	headerReplica   = "X-Faas-Gpu-Replica"
	headerEmulated  = "X-Faas-Gpu-Emulated"
	headerModelLoad = "X-Faas-Gpu-Model-Load"
	headerCache     = "X-Faas-Gpu-Cache"
	// headerModel names the model a request is for, for functions that
	// serve many models.
	headerModel = "X-Model"
	// headerModels and modelsPath are the replica protocol
	// (docs/replica-protocol.md): what the replica holds.
	headerModels = "X-Faas-Gpu-Models"
	modelsPath   = modelload.Path
)

// emulatedRunner stands in for a GPU worker where nothing can run on a GPU:
// it answers after the profiled latency, so that the scheduler, the cache
// and the autoscaler see realistic timings. Like the PyTorch template
// (template/), it loads its function's model when it starts and says it is
// ready only once the model is in memory: a replica's start-up includes the
// load, and no request routed to a ready replica pays it.
type emulatedRunner struct {
	spec ReplicaSpec
	sink LogSink
	log  *zap.Logger
	srv  loopbackServer

	// loaded is closed when the start-up load of the function's model has
	// finished: the replica is ready from then on. The load runs on its own
	// timer, so a request that gives up does not abort it (a real load
	// would go on too).
	loaded chan struct{}
	mu     sync.Mutex
	load   *time.Timer
	// stopped ends a start-up load that Stop cuts short.
	stopped  chan struct{}
	stopOnce sync.Once

	// slots admits Emulation.Slots requests at a time to the "GPU".
	slots chan struct{}
	// loading serialises model loads so a request does not overtake the
	// load of the model it needs.
	loading sync.Mutex
	// resident are the models the emulated GPU memory holds, most recent
	// first, as the last request's Service said (nil: none yet).
	resident atomic.Pointer[[]string]
	// loads is how long the last load of each model took (nil: none yet),
	// for the protocol's loadSeconds.
	loads atomic.Pointer[map[string]time.Duration]
}

func newEmulatedRunner(spec ReplicaSpec, sink LogSink, log *zap.Logger) runner {
	return &emulatedRunner{spec: spec, sink: sink, log: log, loaded: make(chan struct{}), stopped: make(chan struct{}),
		slots: make(chan struct{}, max(spec.Emulation.Slots, 1))}
}

func (r *emulatedRunner) Start() error {
	if err := r.srv.start(r.spec.ID, http.HandlerFunc(r.serve), r.log); err != nil {
		return err
	}
	em := r.spec.Emulation
	// With a profile (Serve) the latency and the load come from it, the
	// load by where the model is (GPU, node, store): the configured
	// -emulated-* times are only the fallback, and logging them said a
	// load of 0.2 s where the replica took 1.22 s.
	load := em.LoadTime.String()
	if em.Serve != nil {
		load = "profiled"
	}
	r.sink(r.spec.ID, fmt.Sprintf("emulated GPU worker: no process given, answering after %s with a %s model load",
		em.Latency, load))
	fields := []zap.Field{zap.String("replica", r.spec.ID), zap.String("function", r.spec.Function), zap.String("model", em.Model)}
	if em.Serve == nil {
		fields = append(fields, zap.Duration("latency", em.Latency), zap.Duration("loadTime", em.LoadTime))
	} else {
		fields = append(fields, zap.String("latency", "profiled"), zap.String("loadTime", "profiled"))
	}
	r.log.Info("replica is emulated", append(fields, zap.String("url", r.srv.URL()))...)
	r.loadAtStart()
	return nil
}

// loadAtStart loads the function's model before the replica reports
// ready, as the template does before /_/health answers. A load that takes
// no time (a cache hit, or no load time configured) is done before Start
// returns, so the replica is ready at once.
func (r *emulatedRunner) loadAtStart() {
	em := r.spec.Emulation
	if em.Serve == nil {
		if em.LoadTime <= 0 {
			close(r.loaded)
			return
		}
		r.mu.Lock()
		r.load = time.AfterFunc(em.LoadTime, func() { close(r.loaded) })
		r.mu.Unlock()
		return
	}
	// Held for the load, so a request sent to the replica before it is
	// ready (nothing routes one) waits for the load rather than paying
	// another.
	r.loading.Lock()
	svc := em.Serve(em.Model)
	finish := func() {
		if svc.Load > 0 {
			r.noteLoad(em.Model, svc.Load)
			r.log.Info("model loaded", zap.String("replica", r.spec.ID), zap.String("model", em.Model), zap.Duration("loadTime", svc.Load))
		}
		if svc.Resident != nil {
			r.resident.Store(&svc.Resident)
		}
		close(r.loaded)
	}
	if svc.Load <= 0 {
		finish()
		r.loading.Unlock()
		return
	}
	go func() {
		defer r.loading.Unlock()
		t := time.NewTimer(svc.Load)
		defer t.Stop()
		select {
		case <-t.C:
			finish()
		case <-r.stopped: // stopped while loading: never ready
		}
	}()
}

func (r *emulatedRunner) URL() string { return r.srv.URL() }

// Ready is true once the model is loaded, while the server answers.
func (r *emulatedRunner) Ready() bool { return r.isLoaded() && r.srv.Ready() }

// Unready says why a started replica is not ready yet.
func (r *emulatedRunner) Unready() string {
	if r.srv.Ready() && !r.isLoaded() {
		return "loading model " + r.spec.Emulation.Model
	}
	return ""
}

func (r *emulatedRunner) isLoaded() bool {
	select {
	case <-r.loaded:
		return true
	default:
		return false
	}
}

func (r *emulatedRunner) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stopped) })
	forced := r.srv.stop(ctx)
	r.mu.Lock()
	if r.load != nil {
		r.load.Stop()
	}
	r.mu.Unlock()
	if forced {
		r.log.Warn("replica stopped with requests in flight", zap.String("replica", r.spec.ID))
	}
	return nil
}

// awaitModel waits for the start-up model load; cold is true for requests
// that had to wait for it (sent before the replica was ready).
func (r *emulatedRunner) awaitModel(ctx context.Context) (cold bool, err error) {
	if r.isLoaded() {
		return false, nil
	}
	select {
	case <-r.loaded:
		return true, nil
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

func (r *emulatedRunner) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == modelsPath && req.Method == http.MethodGet {
		r.serveModels(w)
		return
	}
	if req.URL.Path == modelsPath && req.Method == http.MethodPost {
		r.fillModel(w, req)
		return
	}
	ctx := req.Context()
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, fmt.Sprintf("read body: %v", err), http.StatusBadRequest)
		return
	}
	h := w.Header()
	var cold bool
	if r.spec.Emulation.Serve != nil {
		if cold, err = r.serveModel(ctx, req.Header.Get(headerModel), h); err != nil {
			return // the caller is gone: nobody to answer
		}
	} else {
		cold, err = r.awaitModel(ctx)
		if err != nil {
			return // the caller is gone: nobody to answer
		}
		if err := sleepCtx(ctx, r.spec.Emulation.Latency); err != nil {
			return
		}
	}

	h.Set(headerReplica, r.spec.ID)
	h.Set(headerEmulated, "true")
	h.Set(headerModels, strings.Join(r.models(), ","))
	if cold {
		h.Set(headerModelLoad, "cold")
	} else {
		h.Set(headerModelLoad, "warm")
	}
	if len(body) > 0 {
		ct := req.Header.Get("Content-Type")
		if ct == "" {
			ct = "application/octet-stream"
		}
		h.Set("Content-Type", ct)
		_, _ = w.Write(body)
		return
	}
	h.Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(r.identity())
}

// serveModel runs one request on the emulated GPU: it waits for a slot,
// loads the model if the replica lacks it, then takes the profiled latency.
func (r *emulatedRunner) serveModel(ctx context.Context, model string, h http.Header) (cold bool, err error) {
	if model == "" {
		model = r.spec.Emulation.Model
	}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-r.slots }()
	r.loading.Lock()
	svc := r.spec.Emulation.Serve(model)
	err = sleepCtx(ctx, svc.Load)
	if err == nil && svc.Load > 0 {
		r.noteLoad(model, svc.Load)
	}
	// Held once loaded (or given up on: the backend's cache holds it
	// now), so that a listing never names a model without its load time.
	if svc.Resident != nil {
		r.resident.Store(&svc.Resident)
	}
	r.loading.Unlock()
	if err != nil {
		return false, err
	}
	h.Set(headerCache, svc.Outcome)
	return svc.Load > 0, sleepCtx(ctx, svc.Latency)
}

// models are what the emulated GPU memory holds now, most recently used
// first: with Serve, what the backend's cache said last; without, the
// function's model once its load is done.
func (r *emulatedRunner) models() []string {
	if r.spec.Emulation.Serve != nil {
		if p := r.resident.Load(); p != nil {
			return *p
		}
		return []string{}
	}
	select {
	case <-r.loaded:
		return []string{r.spec.Emulation.Model}
	default:
		return []string{}
	}
}

// noteLoad records how long the last load of model took, under r.loading
// (the one writer); readers take the map whole.
func (r *emulatedRunner) noteLoad(model string, d time.Duration) {
	next := map[string]time.Duration{model: d}
	for m, v := range r.loadTimes() {
		if m != model {
			next[m] = v
		}
	}
	r.loads.Store(&next)
}

func (r *emulatedRunner) loadTimes() map[string]time.Duration {
	if p := r.loads.Load(); p != nil {
		return *p
	}
	return nil
}

// modelsReply is the replica protocol's answer to GET /_/models.
type modelsReply struct {
	Models []modelEntry `json:"models"`
}

type modelEntry struct {
	Name        string  `json:"name"`
	Bytes       int64   `json:"bytes,omitempty"`
	LoadSeconds float64 `json:"loadSeconds,omitempty"`
}

func (r *emulatedRunner) serveModels(w http.ResponseWriter) {
	reply := modelsReply{Models: []modelEntry{}}
	for _, m := range r.models() {
		e := modelEntry{Name: m}
		if d, ok := r.loadTimes()[m]; ok {
			e.LoadSeconds = d.Seconds()
		} else if m == r.spec.Emulation.Model && r.spec.Emulation.Serve == nil {
			e.LoadSeconds = r.spec.Emulation.LoadTime.Seconds()
		}
		reply.Models = append(reply.Models, e)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply)
}

// fillModel takes a load in the replica's idle time (POST /_/models,
// docs/replica-protocol.md): the model loads beside the requests it
// serves, which neither wait for it nor are waited for, and is kept only
// where it fits beside what the replica holds then; the answer is the
// replica's list, as GET gives it, once the model is in.
func (r *emulatedRunner) fillModel(w http.ResponseWriter, req *http.Request) {
	fill := r.spec.Fill
	if fill == nil || r.spec.Emulation.Serve == nil {
		http.Error(w, "this replica takes no model loads", http.StatusNotImplemented)
		return
	}
	var ask modelload.Request
	if err := json.NewDecoder(io.LimitReader(req.Body, 64<<10)).Decode(&ask); err != nil || ask.Model == "" {
		http.Error(w, `want {"model": NAME}`, http.StatusBadRequest)
		return
	}
	if !r.isLoaded() {
		http.Error(w, "still loading its own model", http.StatusServiceUnavailable)
		return
	}
	d, commit := fill(ask.Model)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-req.Context().Done():
		return // the caller is gone: a load asked for nobody is not kept
	case <-r.stopped:
		http.Error(w, "stopped", http.StatusServiceUnavailable)
		return
	}
	r.loading.Lock()
	resident, ok := commit()
	if ok {
		if d > 0 {
			r.noteLoad(ask.Model, d)
		}
		r.resident.Store(&resident)
	}
	r.loading.Unlock()
	if !ok {
		http.Error(w, fmt.Sprintf("model %s does not fit beside %s", ask.Model, strings.Join(resident, ",")), http.StatusInsufficientStorage)
		return
	}
	r.log.Info("emulated worker loaded a model in its idle time", zap.String("replica", r.spec.ID), zap.String("model", ask.Model), zap.Duration("loadTime", d))
	r.serveModels(w)
}

// emulatedIdentity is what an emulated replica answers to an empty request:
// enough to check where the scheduler put it.
type emulatedIdentity struct {
	Replica   string `json:"replica"`
	Function  string `json:"function"`
	Model     string `json:"model"`
	Emulated  bool   `json:"emulated"`
	GPU       string `json:"gpu"`
	SMPercent *int   `json:"smPercent,omitempty"`
}

func (r *emulatedRunner) identity() emulatedIdentity {
	id := emulatedIdentity{
		Replica:  r.spec.ID,
		Function: r.spec.Function,
		Model:    r.spec.Emulation.Model,
		Emulated: true,
		GPU:      envValue(r.spec.Env, "NVIDIA_VISIBLE_DEVICES"),
	}
	if sm, err := strconv.Atoi(envValue(r.spec.Env, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")); err == nil {
		id.SMPercent = &sm
	}
	return id
}

// envValue returns the last value of key in a KEY=VALUE list; the last one
// wins, as it does for exec.Cmd.Env.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if len(kv) > len(key) && kv[len(key)] == '=' && kv[:len(key)] == key {
			v = kv[len(key)+1:]
		}
	}
	return v
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loopbackServer is the HTTP server of the replicas that run inside the
// provider (emulated and classic watchdog). Shared here so both stop the same
// way: graceful first, then cancelling in-flight requests.
type loopbackServer struct {
	mu     sync.Mutex
	srv    *http.Server
	url    string
	cancel context.CancelFunc
	served chan struct{}
	ready  atomic.Bool
}

func (s *loopbackServer) start(id string, h http.Handler, log *zap.Logger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("start %s: already started", id)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("start %s: listen: %w", id, err)
	}
	// Requests get a base context that Stop cancels when the grace period is
	// over, so emulated sleeps and classic processes end with the replica.
	base, cancel := context.WithCancel(context.Background())
	s.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	s.url = "http://" + ln.Addr().String()
	s.cancel = cancel
	s.served = make(chan struct{})
	s.ready.Store(true)
	go func() {
		defer close(s.served)
		err := s.srv.Serve(ln)
		s.ready.Store(false)
		if !errors.Is(err, http.ErrServerClosed) {
			log.Error("replica server failed", zap.String("replica", id), zap.Error(err))
		}
	}()
	return nil
}

func (s *loopbackServer) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

func (s *loopbackServer) Ready() bool { return s.ready.Load() }

// stop closes the listener, waits for in-flight requests until ctx is done,
// then cancels them. forced reports that requests had to be cancelled.
func (s *loopbackServer) stop(ctx context.Context) (forced bool) {
	s.mu.Lock()
	srv, cancel, served := s.srv, s.cancel, s.served
	s.mu.Unlock()
	if srv == nil {
		return false
	}
	s.ready.Store(false)
	if err := srv.Shutdown(ctx); err != nil {
		forced = true
		cancel()
		_ = srv.Close()
	}
	cancel()
	<-served
	return forced
}
