package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/faas-gpu/faas-gpu/cache"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
)

// reconcileLocked places pending replicas, oldest function first, writes
// the records that changed and starts what was placed. It runs after every
// change that may free or need capacity. skip, when set, is a function
// whose replicas were just tried (commitLocked).
func (b *Backend) reconcileLocked(now time.Time, skip *function) {
	if b.closed {
		return
	}
	var evicted []stopJob
	var touched []*function
	for _, fn := range b.sortedFunctionsLocked() {
		if fn == skip {
			continue
		}
		placed, ev, t := b.placeLocked(fn, now)
		evicted, touched = append(evicted, ev...), append(touched, t...)
		if len(placed) == 0 {
			continue
		}
		// Recorded before started: a replica runs only where its record says.
		b.saveLogged(fn)
		for _, r := range placed {
			b.startLocked(fn, r, now)
		}
	}
	for _, fn := range touched {
		b.saveLogged(fn) // a no-op for those saved above
	}
	b.stopLaterLocked(evicted)
}

// placeLocked books GPUs for fn's pending replicas and returns those placed,
// still to start, the warm replicas evicted to make room, still to stop,
// and the functions those belonged to, whose records changed.
func (b *Backend) placeLocked(fn *function, now time.Time) (placed []*replica, evicted []stopJob, touched []*function) {
	for _, r := range fn.replicas {
		if r.placement != nil {
			continue
		}
		began := time.Now() // not now: that may be a test's made-up time
		p, gone, err := b.alloc.Place(r.id, requestOf(fn, r), scheduler.Hints{Model: fn.plan.Request.Model, Now: now, Speed: b.speedFor(fn, r.config)})
		b.stats.Placed(gone, err, time.Since(began))
		if err != nil {
			if r.reason != err.Error() {
				r.reason, r.reasonCode = err.Error(), scheduler.NoFitCodeOf(err)
				b.log.Info("replica pending", zap.String("function", fn.spec.Name()), zap.String("namespace", fn.spec.Namespace()), zap.String("replica", r.id), zap.String("reason", r.reason))
				b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), r.id, "pending: "+r.reason, now)
			}
			continue
		}
		jobs, fns := b.forgetEvictedLocked(gone, now)
		evicted, touched = append(evicted, jobs...), append(touched, fns...)
		r.placement, r.reason, r.reasonCode = &p, "", ""
		placed = append(placed, r)
	}
	return placed, evicted, touched
}

// forgetEvictedLocked drops the warm replicas the allocator evicted to make
// room and returns them to stop, with the functions they belonged to.
func (b *Backend) forgetEvictedLocked(ids []string, now time.Time) ([]stopJob, []*function) {
	var jobs []stopJob
	var fns []*function
	for _, id := range ids {
		for _, fn := range b.functions {
			i := slices.IndexFunc(fn.idle, func(r *replica) bool { return r.id == id })
			if i < 0 {
				continue
			}
			r := fn.idle[i]
			fn.idle = append(fn.idle[:i], fn.idle[i+1:]...)
			b.log.Info("warm replica evicted to free GPU memory", zap.String("function", fn.spec.Name()), zap.String("replica", id))
			b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), id, "warm replica evicted: its GPU memory was needed", now)
			jobs = append(jobs, stopJob{run: r.run, dir: b.state.replicaDir(id), quiet: &r.quiet})
			fns = append(fns, fn)
			break
		}
	}
	return jobs, fns
}

// speedFor is the profiled throughput of fn's model at slice c on each
// product, for the placement's speed preference; only profiles measured on
// that product count.
func (b *Backend) speedFor(fn *function, c scheduler.SliceConfig) func(string) float64 {
	model := fn.plan.Request.Model
	return func(product string) float64 {
		p, fb, ok := b.cfg.Profiles.Lookup(model, product)
		if !ok || fb.Used() {
			return 0
		}
		lat, err := scheduler.LatencyAt(p, max(c.Batch, 1), float64(c.SMPercent))
		if err != nil {
			return 0
		}
		return float64(max(c.Batch, 1)) * 1000 / lat
	}
}

// startLocked launches a placed replica.
func (b *Backend) startLocked(fn *function, r *replica, now time.Time) {
	started := time.Now() // the start-up's clock: now may be made up
	ns, name := fn.spec.Namespace(), fn.spec.Name()
	sink := func(instance, text string) {
		if !r.quiet.Load() {
			b.logs.Append(ns, name, instance, text, time.Now())
		}
	}
	spec, err := b.replicaSpec(fn, r)
	if err != nil {
		b.log.Error("replica not started", zap.String("replica", r.id), zap.Error(err))
		sink(r.id, "not started: "+err.Error())
		return
	}
	b.cache.SetCapacity(r.id, modelCapacity(fn, r))
	var run runner
	switch {
	case spec.Process == "":
		run, r.emulated = newEmulatedRunner(spec, sink, b.log), true
	case spec.HTTPMode:
		run = newProcessRunner(spec, sink, b.log)
	default:
		run = newClassicRunner(spec, sink, b.log)
	}
	if spec.Process != "" {
		// A process loads its model when it starts.
		b.cache.Preload(r.id, fn.plan.Request.Model, modelBytes(fn.plan.Request), now)
	}
	if err := run.Start(); err != nil {
		b.log.Error("replica failed to start", zap.String("replica", r.id), zap.Error(err))
		sink(r.id, "failed to start: "+err.Error())
		return
	}
	r.run = b.watchStartup(r, run, started)
	b.log.Info("replica placed", zap.String("function", name), zap.String("namespace", ns), zap.String("replica", r.id),
		zap.String("node", r.placement.Node), zap.Strings("gpus", r.placement.GPUs), zap.Int("smPercent", r.placement.Slice.SMPercent),
		zap.String("memory", gpu.FormatBytes(r.placement.Slice.MemoryBytes)), zap.Int("batch", r.config.Batch), zap.Bool("emulated", r.emulated), zap.String("url", run.URL()))
	sink(r.id, fmt.Sprintf("placed on %s GPU %s with %d%% SM and %s", r.placement.Node, strings.Join(r.placement.GPUs, ","), r.placement.Slice.SMPercent, gpu.FormatBytes(r.placement.Slice.MemoryBytes)))
}

// startupPoll is how often a starting replica is asked whether it is
// ready: a small part of the process runner's own probe period (50 ms).
const startupPoll = 10 * time.Millisecond

// watchStartup times replica r from started, its placement, to ready, for
// its report and the start-up histogram, and returns the runner to keep:
// emulated and classic replicas answer once started; a process is watched
// until it is ready or stopped, so run comes back wrapped to tell the
// watch of its Stop.
func (b *Backend) watchStartup(r *replica, run runner, started time.Time) runner {
	if run.Ready() {
		b.readied(r, time.Since(started))
		return run
	}
	w := &watchedRunner{runner: run, stopped: make(chan struct{})}
	go func() {
		t := time.NewTicker(startupPoll)
		defer t.Stop()
		for {
			select {
			case <-w.stopped:
				return
			case <-b.stop:
				return
			case <-t.C:
			}
			if run.Ready() {
				b.readied(r, time.Since(started))
				return
			}
		}
	}()
	return w
}

// readied records that r became ready d after its placement.
func (b *Backend) readied(r *replica, d time.Duration) {
	r.readyAfter.Store(int64(max(d, 1))) // 0 means not yet
	b.stats.Started(d)
}

// watchedRunner is a runner whose start-up is being watched; Stop ends the
// watch.
type watchedRunner struct {
	runner
	stopped  chan struct{}
	stopOnce sync.Once
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

// modelCapacity is how many bytes of models a replica's memory limit
// holds once its CUDA context is paid for.
func modelCapacity(fn *function, r *replica) int64 {
	mem := r.placement.Slice.MemoryBytes
	if p := fn.plan.Profile; p != nil && p.MemoryBytes > p.ModelSizeBytes {
		mem -= p.MemoryBytes - p.ModelSizeBytes
	}
	return max(mem, 0)
}

// serveFor answers, for an emulated replica, what a request for a model
// costs: its profiled latency at the replica's slice and, on a cache miss,
// the profiled load time (less from the node tier).
func (b *Backend) serveFor(fn *function, r *replica) func(model string) Service {
	sm, batch := float64(r.config.SMPercent), max(r.config.Batch, 1)
	// A copy: an update replaces fn.plan under the backend's lock while this
	// replica may still be answering.
	plan := fn.plan
	return func(model string) Service {
		now := time.Now()
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
		lat, load := b.cfg.Emulation.Latency, b.cfg.Emulation.LoadTime
		if prof != nil {
			if l, err := scheduler.LatencyAt(prof, batch, sm); err == nil {
				lat = time.Duration(l * float64(time.Millisecond))
			}
			if prof.LoadTime > 0 {
				load = prof.LoadTime
			}
		}
		// The load is counted here, with the cache's miss or node hit, so
		// the two agree; the replica sleeps exactly this long (a caller that
		// leaves early does not undo it: the cache holds the model now).
		outcome, _ := b.cache.Use(r.id, model, size, now)
		switch outcome {
		case cache.Hit:
			load = 0
		case cache.NodeHit:
			load = time.Duration(float64(load) * b.cfg.NodeLoadFactor)
			b.stats.Loaded(scheduler.ModelLoadNode, load)
		default:
			b.stats.Loaded(scheduler.ModelLoadCold, load)
		}
		return Service{Latency: lat, Load: load, Outcome: outcome.String()}
	}
}

// processOf is the function's process: envProcess, or an fprocess env var
// as the watchdog reads it.
func processOf(dep types.FunctionDeployment) string {
	if dep.EnvProcess != "" {
		return dep.EnvProcess
	}
	return dep.EnvVars["fprocess"]
}

// Provider settings that must not leak into a function's environment.
var providerEnv = map[string]bool{"port": true, "basic_auth": true, "secret_mount_path": true, "read_timeout": true, "write_timeout": true}

func (b *Backend) replicaSpec(fn *function, r *replica) (ReplicaSpec, error) {
	dep := fn.spec.Deployment
	dir := b.state.replicaDir(r.id)
	secretsDir := filepath.Join(dir, "secrets")
	if err := os.MkdirAll(secretsDir, 0o700); err != nil {
		return ReplicaSpec{}, fmt.Errorf("replica dir: %w", err)
	}
	for _, s := range dep.Secrets {
		v, err := b.state.readSecret(dep.Namespace, s)
		if err != nil {
			return ReplicaSpec{}, fmt.Errorf("secret %s: %w", s, err)
		}
		if err := os.WriteFile(filepath.Join(secretsDir, s), v, 0o600); err != nil {
			return ReplicaSpec{}, fmt.Errorf("secret %s: %w", s, err)
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !providerEnv[k] {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(dep.EnvVars))
	for k := range dep.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+dep.EnvVars[k])
	}
	process := processOf(dep)
	if process != "" {
		env = append(env, "fprocess="+process)
	}
	env = append(env, placementEnv(*r.placement, b.cfg.MPSPipeDir)...)
	env = append(env,
		"secret_mount_path="+secretsDir+"/",
		"FAAS_GPU_REPLICA="+r.id,
		"FAAS_GPU_MODEL="+fn.plan.Request.Model,
	)
	// A function that fixes its own batch size (as `faas-gpu profile` does
	// for its batch points) keeps it; otherwise the plan's batch applies.
	if _, own := dep.EnvVars["FAAS_GPU_BATCH"]; !own {
		env = append(env, "FAAS_GPU_BATCH="+strconv.Itoa(max(r.config.Batch, 1)))
	}
	return ReplicaSpec{
		ID:        r.id,
		Function:  dep.Service,
		Namespace: dep.Namespace,
		Process:   process,
		HTTPMode:  dep.EnvVars["mode"] == "http",
		Env:       env,
		WorkDir:   dir,
		Emulation: Emulation{
			Latency:  b.cfg.Emulation.Latency,
			LoadTime: b.cfg.Emulation.LoadTime,
			Model:    fn.plan.Request.Model,
			Slots:    max(r.config.Batch, 1),
			Serve:    b.serveFor(fn, r),
		},
	}, nil
}

// placementEnv is what tells CUDA and MPS which GPU and how much of it the
// replica may use.
func placementEnv(p scheduler.Placement, pipeDir string) []string {
	devices := strings.Join(p.GPUs, ",")
	limits := make([]string, len(p.GPUs))
	for i := range p.GPUs {
		// CUDA numbers the visible devices from 0 inside the process.
		limits[i] = fmt.Sprintf("%d=%dM", i, p.Slice.MemoryBytes>>20)
	}
	return []string{
		"NVIDIA_VISIBLE_DEVICES=" + devices,
		"CUDA_VISIBLE_DEVICES=" + devices,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + strconv.Itoa(p.Slice.SMPercent),
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=" + strings.Join(limits, ","),
		"CUDA_MPS_PIPE_DIRECTORY=" + pipeDir,
	}
}
