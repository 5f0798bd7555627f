package local

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/faas-gpu/faas-gpu/internal/parking"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// Parked processes (lifecycle/parked.go) here are HTTP-mode processes
// (of-watchdog mode=http: processRunner, on its own or behind the
// provider's watchdog) started with FAAS_GPU_PARKED=1 and none of the GPU
// settings, which wait for them on the replica protocol
// (docs/replica-protocol.md, "Parked processes"): GET /_/gpu answers 2xx
// while one waits, and POST /_/gpu hands it the replica's environment and
// answers once it serves with it.

// parkedRunner is a runner that can be started parked and handed its
// settings later: an HTTP-mode process, on its own or behind the
// provider's watchdog.
type parkedRunner interface {
	runner
	handOver(ctx context.Context, settings map[string]string) error
	// parkRefused is why its server showed it does not speak /_/gpu; ""
	// while it has not.
	parkRefused() string
}

// parkedRun is one parked process.
type parkedRun struct {
	id  string
	run parkedRunner
	dir string
	// taken is closed when a replica takes it or it is unparked: its
	// start-up watch ends.
	taken chan struct{}
}

// parkableLocked says whether the backend can park spec's function here:
// one that runs as an HTTP-mode process (of-watchdog mode=http), on its own
// or behind the provider's watchdog (a template's build), not an emulated
// worker, nor a classic, streaming or static one; and that parking.Wanted
// says is to be parked, its image's declaration read from the build's
// Dockerfile. Whether a server really speaks /_/gpu shows once one is
// started (parking.Answer).
func (b *Backend) parkableLocked(spec scheduler.Function) bool {
	dep := spec.Deployment
	build, wd, err := b.watchdogOf(dep)
	if err != nil {
		return false
	}
	var imageEnv map[string]string
	if build != nil {
		imageEnv = build.Image.Env
	}
	if !parking.Wanted(spec, imageEnv) {
		return false
	}
	process := processOf(dep)
	if build != nil && process == "" {
		process = build.process()
	}
	if wd != nil {
		return process != "" && wd.Mode == "http"
	}
	return process != "" && dep.EnvVars["mode"] == "http"
}

// noteParkableLocked records, before the core sees spec, whether its
// function's processes can be parked (Options.CanPark reads it), and says
// so when it asks and cannot. undo puts back what was recorded before, for
// an operation that does not hold.
func (b *Backend) noteParkableLocked(spec scheduler.Function) (undo func()) {
	k := key(spec.Namespace(), spec.Name())
	was, had := b.parkable[k]
	undo = func() {
		if had {
			b.parkable[k] = was
		} else {
			delete(b.parkable, k)
		}
	}
	ok := b.parkableLocked(spec)
	b.parkable[k] = ok
	if spec.Scale.ParkedAsked() != "" && !ok {
		b.log.Warn("function asks for parked processes but does not run as an HTTP-mode process (mode=http): none kept",
			zap.String("function", spec.Name()), zap.String("namespace", spec.Namespace()), zap.String("parked", spec.Scale.ParkedAsked()))
	}
	return undo
}

// canPark is the core's Options.CanPark: called under mu.
func (b *Backend) canPark(spec scheduler.Function) bool {
	return b.parkable[key(spec.Namespace(), spec.Name())]
}

// parkLocked starts a parked process and watches it until it waits for
// its settings (the core's ParkedReady). One that cannot be started is
// the core's ParkedGone: it asks for another at its next tick.
func (b *Backend) parkLocked(e lifecycle.Effect, now time.Time) {
	ns, name := splitKey(e.Function)
	v, ok := b.core.Function(e.Function)
	if !ok {
		return
	}
	id := e.Replica.ID
	dir := b.state.replicaDir(id)
	notParked := func(err error) {
		b.log.Error("process not parked", zap.String("function", name), zap.String("process", id), zap.Error(err))
		_ = os.RemoveAll(dir)
		_ = b.applyLocked(b.core.ParkedGone(id, now), now)
	}
	spec, err := b.replicaSpec(v, &replica{id: id, fn: e.Function}, nil, dir)
	if err != nil {
		notParked(err)
		return
	}
	sink := func(instance, text string) { b.logs.Append(ns, name, instance, text, time.Now()) }
	var run parkedRunner
	if spec.Watchdog != nil {
		run = newWatchdogRunner(spec, sink, b.log)
	} else {
		run = newProcessRunner(spec, sink, b.log).(*processRunner)
	}
	if err := run.Start(); err != nil {
		notParked(err)
		return
	}
	pr := &parkedRun{id: id, run: run, dir: dir, taken: make(chan struct{})}
	b.parked[id] = pr
	b.log.Info("process parked", zap.String("function", name), zap.String("namespace", ns), zap.String("process", id), zap.String("url", run.URL()))
	go b.watchParked(pr)
}

// watchParked reports pr to the core once it waits for its settings.
func (b *Backend) watchParked(pr *parkedRun) {
	t := time.NewTicker(startupPoll)
	defer t.Stop()
	for {
		select {
		case <-pr.taken:
			return
		case <-b.closing.Done():
			return
		case <-t.C:
		}
		ready := pr.run.Ready()
		why := pr.run.parkRefused()
		if !ready && why == "" {
			continue
		}
		b.mu.Lock()
		if b.parked[pr.id] == pr {
			now := time.Now()
			if ready {
				_ = b.applyLocked(b.core.ParkedReady(pr.id, lifecycle.Sight{All: true}, now), now)
			} else {
				b.refuseParkedLocked(pr, why, now)
			}
		}
		b.mu.Unlock()
		return
	}
}

// refuseParkedLocked ends parked process pr, whose server showed that it
// cannot take its GPU settings after its start, and tells the core, which
// parks nothing more of its function until its spec is replaced.
func (b *Backend) refuseParkedLocked(pr *parkedRun, why string, now time.Time) {
	delete(b.parked, pr.id)
	close(pr.taken)
	if v, ok := b.core.Function(b.core.ParkedFunction(pr.id)); ok {
		parking.LogRefusal(b.log, v.Spec, pr.id, why)
	}
	b.stopLaterLocked([]stopJob{{run: pr.run, dir: pr.dir}})
	_ = b.applyLocked(b.core.ParkedRefused(pr.id, why, now), now)
}

// unparkLocked ends a parked process no replica took.
func (b *Backend) unparkLocked(e lifecycle.Effect) (stopJob, bool) {
	pr := b.parked[e.Replica.ID]
	if pr == nil {
		return stopJob{}, false
	}
	delete(b.parked, pr.id)
	close(pr.taken)
	_, name := splitKey(e.Function)
	b.log.Info("parked process stopped", zap.String("function", name), zap.String("process", pr.id), zap.String("why", e.Why))
	return stopJob{run: pr.run, dir: pr.dir}, true
}

// takeParkedLocked hands the parked process id to a replica; nil when it
// is gone (stopped, or never started).
func (b *Backend) takeParkedLocked(id string) *parkedRun {
	pr := b.parked[id]
	if pr == nil {
		return nil
	}
	delete(b.parked, id)
	close(pr.taken)
	return pr
}

// startFromParkedLocked makes parked process pr replica r on placement p:
// it is sent the replica's environment, and the replica is ready once the
// process answers with it. A hand-over that fails loses the replica, as a
// process that died would (the core places another).
func (b *Backend) startFromParkedLocked(v lifecycle.FunctionView, r *replica, p scheduler.Placement, pr *parkedRun, started, now time.Time) {
	ns, name := splitKey(r.fn)
	b.cache.SetCapacity(r.id, v.Plan.ModelRoom(p.Slice.MemoryBytes))
	b.cache.Preload(r.id, v.Plan.Request.Model, modelBytes(v.Plan.Request), now)
	settings := parking.Settings(lifecycle.RenderEnv(lifecycle.EnvInput{Spec: v.Spec, Model: v.Plan.Request.Model, Config: r.config, Placement: p,
		MPSPipeDir: b.cfg.MPSPipeDir, Replica: r.id}))
	run := &handedOver{parkedRunner: pr.run}
	r.run, r.dir = run, pr.dir
	b.running[r.id] = r
	b.log.Info("replica placed", zap.String("function", name), zap.String("namespace", ns), zap.String("replica", r.id),
		zap.String("node", p.Node), zap.Strings("gpus", p.GPUs), zap.Int("smPercent", p.Slice.SMPercent),
		zap.Int("batch", r.config.Batch), zap.String("parkedProcess", pr.id), zap.String("url", pr.run.URL()))
	b.logs.Append(ns, name, pr.id, fmt.Sprintf("becomes replica %s on %s GPU %s with %d%% SM", r.id, p.Node, strings.Join(p.GPUs, ","), p.Slice.SMPercent), now)
	b.stopping.Add(1) // Close waits for the hand-over
	go func() {
		defer b.stopping.Done()
		ctx, cancel := context.WithTimeout(b.stopCtx, parking.HandOverTimeout)
		defer cancel()
		err := pr.run.handOver(ctx, settings)
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.running[r.id] != r || b.closed {
			return // stopped meanwhile: its stop ends the process
		}
		now := time.Now()
		if err != nil {
			b.log.Error("parked process not handed over: replica lost", zap.String("replica", r.id), zap.String("process", pr.id), zap.Error(err))
			b.logs.Append(ns, name, r.id, "not started: "+err.Error(), now)
			delete(b.running, r.id)
			b.stopLaterLocked([]stopJob{{run: pr.run, dir: pr.dir, quiet: &r.quiet}})
			_ = b.applyLocked(b.core.ReplicaGone(r.id, now), now)
			return
		}
		run.done.Store(true)
		b.readiedLocked(r, time.Since(started), now)
		b.publishRouteLocked(r.fn)
	}()
}

// handedOver is a parked process that serves as a replica: it answered as
// a parked one, so it is ready only once its hand-over is done.
type handedOver struct {
	parkedRunner
	done atomic.Bool
}

func (h *handedOver) Ready() bool { return h.done.Load() && h.parkedRunner.Ready() }

// Unready passes on why the process is not ready, where it says.
func (h *handedOver) Unready() string {
	if u, ok := h.parkedRunner.(interface{ Unready() string }); ok {
		return u.Unready()
	}
	return ""
}

// handOver gives a parked process the settings of the replica it becomes
// (POST /_/gpu) and returns once it serves with them. From then on a
// restart starts it as that replica (its environment with the settings,
// not parked), and readiness is a replica's.
func (r *processRunner) handOver(ctx context.Context, settings map[string]string) error {
	if err := parking.HandOver(ctx, r.client, r.URL(), settings); err != nil {
		return err
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	r.mu.Lock()
	env := make([]string, 0, len(r.spec.Env)+len(keys))
	for _, kv := range r.spec.Env {
		if k, _, _ := strings.Cut(kv, "="); k != parking.Env {
			if _, set := settings[k]; set {
				continue
			}
			env = append(env, kv)
		}
	}
	for _, k := range keys {
		env = append(env, k+"="+settings[k])
	}
	r.spec.Env, r.spec.Parked = env, false
	r.probePath, r.probeStrict = r.handedProbe.path, r.handedProbe.strict
	r.mu.Unlock()
	return nil
}

// parkRefused is why the function's process behind the watchdog showed it
// cannot be parked; "" while it has not.
func (r *watchdogRunner) parkRefused() string {
	r.mu.Lock()
	inner := r.inner
	r.mu.Unlock()
	if p, ok := inner.(*processRunner); ok {
		return p.parkRefused()
	}
	return ""
}

// handOver passes a parked watchdog replica's settings to its function's
// process; the watchdog itself needs none.
func (r *watchdogRunner) handOver(ctx context.Context, settings map[string]string) error {
	r.mu.Lock()
	inner := r.inner
	r.mu.Unlock()
	p, ok := inner.(*processRunner)
	if !ok {
		return fmt.Errorf("hand-over: replica %s runs no HTTP-mode process", r.spec.ID)
	}
	return p.handOver(ctx, settings)
}
