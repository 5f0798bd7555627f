package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/internal/parking"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
)

// startLocked launches a replica the core placed; a warm one (restored
// warm) starts out of service.
func (b *Backend) startLocked(e lifecycle.Effect, now time.Time) {
	started := time.Now() // the start-up's clock: now may be made up
	ns, name := splitKey(e.Function)
	v, ok := b.core.Function(e.Function)
	if !ok || e.Replica.Placement == nil {
		return
	}
	r := &replica{id: e.Replica.ID, fn: e.Function, config: e.Replica.Config}
	p := *e.Replica.Placement
	if e.Why != "" { // a replacement: a consolidation move
		b.log.Info("replica started", zap.String("function", name), zap.String("replica", r.id), zap.Strings("gpus", p.GPUs), zap.String("why", e.Why))
		b.logs.Append(ns, name, r.id, e.Why, now)
	}
	if pr := b.takeParkedLocked(e.Parked); pr != nil {
		b.startFromParkedLocked(v, r, p, pr, started, now)
		return
	}
	sink := func(instance, text string) {
		if !r.quiet.Load() {
			b.logs.Append(ns, name, instance, text, time.Now())
		}
	}
	spec, err := b.replicaSpec(v, r, &p, b.state.replicaDir(r.id))
	if err != nil {
		b.log.Error("replica not started", zap.String("replica", r.id), zap.Error(err))
		sink(r.id, "not started: "+err.Error())
		return
	}
	b.cache.SetCapacity(r.id, v.Plan.ModelRoom(p.Slice.MemoryBytes))
	var run runner
	switch {
	case spec.Watchdog != nil:
		run = newWatchdogRunner(spec, sink, b.log)
	case spec.Process == "":
		run, r.emulated = newEmulatedRunner(spec, sink, b.log), true
	case spec.HTTPMode:
		run = newProcessRunner(spec, sink, b.log)
	default:
		run = newClassicRunner(spec, sink, b.log)
	}
	if spec.Process != "" || spec.Watchdog != nil {
		// A process loads its model when it starts.
		b.cache.Preload(r.id, v.Plan.Request.Model, modelBytes(v.Plan.Request), now)
	}
	if err := run.Start(); err != nil {
		b.log.Error("replica failed to start", zap.String("replica", r.id), zap.Error(err))
		sink(r.id, "failed to start: "+err.Error())
		return
	}
	var readyNow bool
	r.run, readyNow = b.watchStartup(r, run, started)
	b.running[r.id] = r
	if readyNow {
		// Known to the backend first: a replica ready at once may retire
		// the replicas it replaces here, and the route then published
		// must hold it, or requests meet a function with no replica (503).
		b.readiedLocked(r, time.Since(started), now)
	}
	b.log.Info("replica placed", zap.String("function", name), zap.String("namespace", ns), zap.String("replica", r.id),
		zap.String("node", p.Node), zap.Strings("gpus", p.GPUs), zap.Int("smPercent", p.Slice.SMPercent),
		zap.String("memory", gpu.FormatBytes(p.Slice.MemoryBytes)), zap.Int("batch", r.config.Batch), zap.Bool("emulated", r.emulated), zap.String("url", run.URL()))
	sink(r.id, fmt.Sprintf("placed on %s GPU %s with %d%% SM and %s", p.Node, strings.Join(p.GPUs, ","), p.Slice.SMPercent, gpu.FormatBytes(p.Slice.MemoryBytes)))
}

// startupPoll is how often a starting replica is asked whether it is
// ready: a small part of the process runner's own probe period (50 ms).
const startupPoll = 10 * time.Millisecond

// watchStartup times replica r from started, its placement, to ready, for
// its report and the start-up histogram, and returns the runner to keep:
// emulated and classic replicas answer once started; a process is watched
// until it is ready or stopped, so run comes back wrapped to tell the
// watch of its Stop. readyNow says it answers already: the caller then
// records it ready (readiedLocked) once it is in b.running.
func (b *Backend) watchStartup(r *replica, run runner, started time.Time) (_ runner, readyNow bool) {
	if run.Ready() {
		return run, true
	}
	w := &watchedRunner{runner: run, stopped: make(chan struct{})}
	go func() {
		t := time.NewTicker(startupPoll)
		defer t.Stop()
		for {
			select {
			case <-w.stopped:
				return
			case <-b.closing.Done():
				return
			case <-t.C:
			}
			if run.Ready() {
				b.mu.Lock()
				b.readiedLocked(r, time.Since(started), time.Now())
				b.mu.Unlock()
				return
			}
		}
	}()
	return w, false
}

// readiedLocked records that r became ready d after its placement, at
// now (the operation's time when it was ready at once, as an emulated
// worker is).
func (b *Backend) readiedLocked(r *replica, d time.Duration, now time.Time) {
	r.readyAfter.Store(int64(max(d, 1))) // 0 means not yet
	b.stats.Started(d)
	_, name := splitKey(r.fn)
	b.log.Info("replica ready", zap.String("function", name), zap.String("replica", r.id), zap.Duration("startup", d))
	// A replacement ready retires the replicas it replaces
	// (make-before-break): their Demote or Stop is carried out now.
	_ = b.applyLocked(b.core.ReplicaReady(r.id, now), now)
}

// watchedRunner is a runner whose start-up is being watched; Stop ends the
// watch.
type watchedRunner struct {
	runner
	stopped  chan struct{}
	stopOnce sync.Once
}

// Unready passes on why the watched replica is not ready, where it says.
func (w *watchedRunner) Unready() string {
	if u, ok := w.runner.(interface{ Unready() string }); ok {
		return u.Unready()
	}
	return ""
}

func (w *watchedRunner) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() { close(w.stopped) })
	return w.runner.Stop(ctx)
}

func modelBytes(req gpu.Request) int64 {
	if req.ModelSizeBytes > 0 {
		return req.ModelSizeBytes
	}
	return defaultModelBytes
}

// serveFor answers, for an emulated replica, what a request for a model
// costs: its profiled latency at the replica's slice and, on a cache miss,
// the profiled load time (less from the node tier).
func (b *Backend) serveFor(plan scheduler.Plan, r *replica) func(model string) Service {
	return func(model string) Service {
		lat, load, size := b.modelCost(plan, r, model)
		// The load is counted here, with the cache's miss or node hit, so
		// the two agree; the replica sleeps exactly this long (a caller that
		// leaves early does not undo it: the cache holds the model now).
		outcome, _ := b.cache.Use(r.id, model, size, time.Now())
		switch outcome {
		case cache.Hit:
			load = 0
		case cache.NodeHit:
			load = time.Duration(float64(load) * b.cfg.NodeLoadFactor)
			b.stats.Loaded(scheduler.ModelLoadNode, load)
		default:
			b.stats.Loaded(scheduler.ModelLoadCold, load)
		}
		return Service{Latency: lat, Load: load, Outcome: outcome.String(), Resident: b.cache.Models(r.id)}
	}
}

// fillFor answers, for an emulated replica on node, what loading a model
// in its idle time costs (lifecycle.LoadModel): the profiled load time,
// less from the node tier, and the fill that records the model once
// loaded, with the replica's models after it (false: its room was taken
// meanwhile, and nothing is evicted for such a load). No request waited
// for it, so no hit, miss or load is counted.
func (b *Backend) fillFor(plan scheduler.Plan, r *replica, node string) func(model string) (time.Duration, func() ([]string, bool)) {
	return func(model string) (time.Duration, func() ([]string, bool)) {
		_, load, size := b.modelCost(plan, r, model)
		if b.cache.OnNode(node, model, time.Now()) {
			load = time.Duration(float64(load) * b.cfg.NodeLoadFactor)
		}
		return load, func() ([]string, bool) {
			ok := b.cache.Fill(r.id, model, size, time.Now())
			return b.cache.Models(r.id), ok
		}
	}
}

// modelCost is what serving model costs replica r of plan: the latency of
// a request at its slice and the load from cold, by the model's profile
// (the configured -emulated-* times where it has none), and its bytes.
func (b *Backend) modelCost(plan scheduler.Plan, r *replica, model string) (lat, load time.Duration, size int64) {
	prof, size := plan.Profile, modelBytes(plan.Request)
	if model != plan.Request.Model {
		prof, size = nil, defaultModelBytes
		if p, _, ok := b.cfg.Profiles.Lookup(model, b.product); ok {
			prof = p
			if p.ModelSizeBytes > 0 {
				size = p.ModelSizeBytes
			}
		}
	}
	lat, load = b.cfg.Emulation.Latency, b.cfg.Emulation.LoadTime
	if prof != nil {
		if l, err := scheduler.LatencyAt(prof, max(r.config.Batch, 1), float64(r.config.SMPercent)); err == nil {
			lat = time.Duration(l * float64(time.Millisecond))
		}
		if prof.LoadTime > 0 {
			load = prof.LoadTime
		}
	}
	return lat, load, size
}

// processOf is the function's process: envProcess, or an fprocess env var
// as the watchdog reads it.
func processOf(dep types.FunctionDeployment) string {
	if dep.EnvProcess != "" {
		return dep.EnvProcess
	}
	return dep.EnvVars["fprocess"]
}

// writeSecrets makes dir and writes the function's secrets into it, one
// file each.
func (b *Backend) writeSecrets(dep types.FunctionDeployment, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("replica dir: %w", err)
	}
	for _, s := range dep.Secrets {
		val, err := b.state.readSecret(dep.Namespace, s)
		if err != nil {
			return fmt.Errorf("secret %s: %w", s, err)
		}
		if err := os.WriteFile(filepath.Join(dir, s), val, 0o600); err != nil {
			return fmt.Errorf("secret %s: %w", s, err)
		}
	}
	return nil
}

// gpuEnv reports whether variable k would give a process GPU settings, which
// a parked one must not have before its hand-over.
func gpuEnv(k string) bool {
	return strings.HasPrefix(k, "CUDA_") || strings.HasPrefix(k, "NVIDIA_") || strings.HasPrefix(k, "FAAS_GPU_")
}

// Provider settings that must not leak into a function's environment.
var providerEnv = map[string]bool{"port": true, "basic_auth": true, "secret_mount_path": true, "read_timeout": true, "write_timeout": true}

// replicaSpec is what replica r of v runs with on placement p; its
// process works in dir, which it makes. With no placement it is a parked
// process (parked.go): the function's variables and FAAS_GPU_PARKED=1,
// none of the GPU settings, not even the provider's own.
func (b *Backend) replicaSpec(v lifecycle.FunctionView, r *replica, p *scheduler.Placement, dir string) (ReplicaSpec, error) {
	dep := v.Spec.Deployment
	build, wd, err := b.watchdogOf(dep)
	if err != nil {
		return ReplicaSpec{}, err
	}
	process := processOf(dep)
	if build != nil && process == "" {
		process = build.process()
	}
	secretsDir := filepath.Join(dir, "secrets")
	// An emulated worker runs no program: it needs no work dir and reads no
	// secret, and making them was most of a deploy's time (two mkdirs and
	// their fsyncs per replica).
	if process == "" {
		dir, secretsDir = "", ""
	} else if err := b.writeSecrets(dep, secretsDir); err != nil {
		return ReplicaSpec{}, err
	}
	// A local process inherits the provider's environment, less its own
	// settings; then the image's ENV, and what every backend gives a
	// replica.
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !providerEnv[k] && (p != nil || !gpuEnv(k)) {
			env = append(env, kv)
		}
	}
	if build != nil {
		env = append(env, build.imageEnv()...)
	}
	vars := parking.StartEnv(v.Spec)
	if p != nil {
		vars = lifecycle.RenderEnv(lifecycle.EnvInput{Spec: v.Spec, Model: v.Plan.Request.Model, Config: r.config, Placement: *p,
			MPSPipeDir: b.cfg.MPSPipeDir, Replica: r.id})
	}
	for _, e := range vars {
		env = append(env, e.Name+"="+e.Value)
	}
	var fill func(string) (time.Duration, func() ([]string, bool))
	if p != nil {
		fill = b.fillFor(v.Plan, r, p.Node)
	}
	if secretsDir != "" {
		env = append(env, "secret_mount_path="+secretsDir+"/")
	}
	return ReplicaSpec{
		ID:        r.id,
		Function:  dep.Service,
		Namespace: dep.Namespace,
		Process:   process,
		HTTPMode:  dep.EnvVars["mode"] == "http",
		Env:       env,
		WorkDir:   dir,
		Parked:    p == nil,
		Watchdog:  wd,
		Emulation: Emulation{
			Latency:  b.cfg.Emulation.Latency,
			LoadTime: b.cfg.Emulation.LoadTime,
			Model:    v.Plan.Request.Model,
			Slots:    max(r.config.Batch, 1),
			Serve:    b.serveFor(v.Plan, r),
		},
		Fill: fill,
	}, nil
}
