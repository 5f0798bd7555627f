package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
)

// LabelEmulated marks, in a function's status, a function whose replicas
// are emulated GPU workers rather than real processes.
const LabelEmulated = "com.openfaas.gpu.emulated"

// DefaultNamespace always exists.
const DefaultNamespace = "openfaas-fn"

// Config configures the local backend.
type Config struct {
	StateDir  string
	Inventory gpu.Inventory
	// MPSPipeDir is given to replicas as CUDA_MPS_PIPE_DIRECTORY.
	MPSPipeDir string
	// Emulation is how replicas of image-only functions behave.
	Emulation Emulation
	Log       *zap.Logger
}

// Backend runs functions as local processes or emulated GPU workers, placed
// on the inventory's GPUs by the scheduler.
type Backend struct {
	cfg   Config
	log   *zap.Logger
	alloc *scheduler.Allocator
	state *stateStore
	logs  *logHub

	mu         sync.Mutex
	functions  map[string]*function // key: namespace/name
	namespaces map[string]types.FunctionNamespace
	closed     bool
}

type function struct {
	spec      scheduler.Function
	desired   int
	createdAt time.Time
	replicas  []*replica
}

type replica struct {
	id           string
	placement    *scheduler.Placement
	pendingSince time.Time
	reason       string
	run          runner
	emulated     bool
	inFlight     atomic.Int64
}

func key(ns, name string) string { return ns + "/" + name }

// New opens the state dir, restores every function with its placements and
// starts its replicas.
func New(cfg Config) (*Backend, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.MPSPipeDir == "" {
		cfg.MPSPipeDir = "/tmp/nvidia-mps"
	}
	st, err := openState(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cfg:       cfg,
		log:       cfg.Log,
		alloc:     scheduler.NewAllocator(cfg.Inventory),
		state:     st,
		logs:      newLogHub(2000),
		functions: map[string]*function{},
	}
	if b.namespaces, err = st.loadNamespaces(); err != nil {
		st.close()
		return nil, err
	}
	if _, ok := b.namespaces[DefaultNamespace]; !ok {
		b.namespaces[DefaultNamespace] = types.FunctionNamespace{Name: DefaultNamespace, Labels: map[string]string{"openfaas": "1"}}
	}
	recs, err := st.loadFunctions()
	if err != nil {
		st.close()
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, rec := range recs {
		fn := &function{spec: rec.Function, desired: rec.Replicas, createdAt: rec.CreatedAt}
		for _, pr := range rec.Placed {
			r := &replica{id: pr.ID, pendingSince: time.Now()}
			p := pr.Placement
			if err := b.alloc.Restore(pr.ID, p); err != nil {
				b.log.Warn("placement not restored, replica pending", zap.String("replica", pr.ID), zap.Error(err))
			} else {
				r.placement = &p
			}
			fn.replicas = append(fn.replicas, r)
		}
		b.functions[key(rec.Function.Namespace(), rec.Function.Name())] = fn
		b.growLocked(fn)
		b.log.Info("function restored", zap.String("function", rec.Function.Name()), zap.String("namespace", rec.Function.Namespace()), zap.Int("replicas", rec.Replicas), zap.Int("placed", len(rec.Placed)))
	}
	for _, fn := range b.sortedFunctionsLocked() {
		for _, r := range fn.replicas {
			if r.placement != nil {
				b.startLocked(fn, r)
			}
		}
	}
	b.reconcileLocked()
	for _, fn := range b.functions {
		if err := b.saveLocked(fn); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// Close stops every replica; functions stay in the state dir.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	var runs []stopJob
	for _, fn := range b.functions {
		for _, r := range fn.replicas {
			if r.run != nil {
				runs = append(runs, stopJob{run: r.run})
			}
		}
	}
	b.mu.Unlock()
	stopAll(ctx, runs)
	return b.state.close()
}

// stopJob is a removed replica still to stop and clean up.
type stopJob struct {
	run runner
	dir string
}

func stopAll(ctx context.Context, jobs []stopJob) {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if j.run != nil {
				_ = j.run.Stop(ctx)
			}
			if j.dir != "" {
				_ = os.RemoveAll(j.dir)
			}
		}()
	}
	wg.Wait()
}

// Deploy creates a function with its initial replicas.
func (b *Backend) Deploy(ctx context.Context, spec scheduler.Function) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ns, name := spec.Namespace(), spec.Name()
	if err := b.checkLocked(spec); err != nil {
		return err
	}
	if _, ok := b.functions[key(ns, name)]; ok {
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrExist)
	}
	fn := &function{spec: spec, desired: spec.Scale.InitialReplicas(), createdAt: time.Now().UTC()}
	b.functions[key(ns, name)] = fn
	b.growLocked(fn)
	b.reconcileLocked()
	return b.saveLocked(fn)
}

// Update replaces a function's spec and restarts its replicas on it, all
// stopped before the new ones are placed: a GPU has no room for a surge.
func (b *Backend) Update(ctx context.Context, spec scheduler.Function) error {
	b.mu.Lock()
	ns, name := spec.Namespace(), spec.Name()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	if err := b.checkLocked(spec); err != nil {
		b.mu.Unlock()
		return err
	}
	stopped := b.shrinkLocked(fn, 0)
	fn.spec = spec
	fn.desired = spec.Scale.Clamp(fn.desired)
	b.growLocked(fn)
	b.reconcileLocked()
	err := b.saveLocked(fn)
	b.mu.Unlock()
	go stopAll(context.Background(), stopped)
	return err
}

// checkLocked rejects what could never run: an unknown namespace, a missing
// secret, a slice larger than any GPU.
func (b *Backend) checkLocked(spec scheduler.Function) error {
	ns := spec.Namespace()
	if _, ok := b.namespaces[ns]; !ok {
		return &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist", ns)}
	}
	for _, s := range spec.Deployment.Secrets {
		if !b.state.secretExists(ns, s) {
			return &gpu.FieldError{Field: "secrets", Reason: fmt.Sprintf("secret %q not found in namespace %s", s, ns)}
		}
	}
	return scheduler.CanEverFit(b.cfg.Inventory, spec.GPU)
}

// Delete removes a function and its replicas.
func (b *Backend) Delete(ctx context.Context, ns, name string) error {
	b.mu.Lock()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	stopped := b.shrinkLocked(fn, 0)
	delete(b.functions, key(ns, name))
	err := b.state.deleteFunction(ns, name)
	b.reconcileLocked()
	b.mu.Unlock()
	b.logs.Forget(ns, name)
	stopAll(ctx, stopped)
	return err
}

// Scale sets the desired replica count, inside the function's bounds.
func (b *Backend) Scale(ctx context.Context, ns, name string, replicas int) error {
	b.mu.Lock()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	want := fn.spec.Scale.Clamp(replicas)
	if want != replicas {
		b.log.Info("replica count clamped to the function's scale bounds", zap.String("function", name), zap.Int("asked", replicas), zap.Int("set", want))
	}
	fn.desired = want
	stopped := b.shrinkLocked(fn, want)
	b.growLocked(fn)
	b.reconcileLocked()
	err := b.saveLocked(fn)
	b.mu.Unlock()
	stopAll(ctx, stopped)
	return err
}

// growLocked adds pending replicas up to the desired count.
func (b *Backend) growLocked(fn *function) {
	for len(fn.replicas) < fn.desired {
		fn.replicas = append(fn.replicas, &replica{id: newReplicaID(fn.spec.Name()), pendingSince: time.Now().UTC()})
	}
}

// shrinkLocked removes replicas above n, pending ones first, then the
// newest, releases their GPUs and returns the replicas to stop.
func (b *Backend) shrinkLocked(fn *function, n int) []stopJob {
	var stopped []stopJob
	for len(fn.replicas) > n {
		victim := len(fn.replicas) - 1
		for i := len(fn.replicas) - 1; i >= 0; i-- {
			if fn.replicas[i].placement == nil {
				victim = i
				break
			}
		}
		r := fn.replicas[victim]
		fn.replicas = append(fn.replicas[:victim], fn.replicas[victim+1:]...)
		if r.placement != nil {
			if err := b.alloc.Release(r.id); err != nil {
				b.log.Error("release", zap.String("replica", r.id), zap.Error(err))
			}
		}
		if r.run != nil {
			b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), r.id, "replica removed", time.Now())
		}
		stopped = append(stopped, stopJob{run: r.run, dir: b.state.replicaDir(r.id)})
	}
	return stopped
}

func (b *Backend) sortedFunctionsLocked() []*function {
	fns := make([]*function, 0, len(b.functions))
	for _, fn := range b.functions {
		fns = append(fns, fn)
	}
	sort.Slice(fns, func(i, j int) bool {
		if !fns[i].createdAt.Equal(fns[j].createdAt) {
			return fns[i].createdAt.Before(fns[j].createdAt)
		}
		return key(fns[i].spec.Namespace(), fns[i].spec.Name()) < key(fns[j].spec.Namespace(), fns[j].spec.Name())
	})
	return fns
}

// reconcileLocked places pending replicas, oldest function first, and starts
// them. It runs after every change that may free or need capacity.
func (b *Backend) reconcileLocked() {
	if b.closed {
		return
	}
	for _, fn := range b.sortedFunctionsLocked() {
		placedAny := false
		for _, r := range fn.replicas {
			if r.placement != nil {
				continue
			}
			p, err := b.alloc.Reserve(r.id, fn.spec.GPU)
			if err != nil {
				if r.reason != err.Error() {
					r.reason = err.Error()
					b.log.Info("replica pending", zap.String("function", fn.spec.Name()), zap.String("namespace", fn.spec.Namespace()), zap.String("replica", r.id), zap.String("reason", r.reason))
					b.logs.Append(fn.spec.Namespace(), fn.spec.Name(), r.id, "pending: "+r.reason, time.Now())
				}
				break // the function's other replicas ask the same: no room for them either
			}
			r.placement, r.reason = &p, ""
			placedAny = true
			b.startLocked(fn, r)
		}
		if placedAny {
			if err := b.saveLocked(fn); err != nil {
				b.log.Error("save placements", zap.String("function", fn.spec.Name()), zap.Error(err))
			}
		}
	}
}

// startLocked launches a placed replica.
func (b *Backend) startLocked(fn *function, r *replica) {
	ns, name := fn.spec.Namespace(), fn.spec.Name()
	sink := func(instance, text string) { b.logs.Append(ns, name, instance, text, time.Now()) }
	spec, err := b.replicaSpec(fn, r)
	if err != nil {
		b.log.Error("replica not started", zap.String("replica", r.id), zap.Error(err))
		sink(r.id, "not started: "+err.Error())
		return
	}
	var run runner
	switch {
	case spec.Process == "":
		run, r.emulated = newEmulatedRunner(spec, sink, b.log), true
	case spec.HTTPMode:
		run = newProcessRunner(spec, sink, b.log)
	default:
		run = newClassicRunner(spec, sink, b.log)
	}
	if err := run.Start(); err != nil {
		b.log.Error("replica failed to start", zap.String("replica", r.id), zap.Error(err))
		sink(r.id, "failed to start: "+err.Error())
		return
	}
	r.run = run
	b.log.Info("replica placed", zap.String("function", name), zap.String("namespace", ns), zap.String("replica", r.id),
		zap.String("node", r.placement.Node), zap.Strings("gpus", r.placement.GPUs), zap.Int("smPercent", r.placement.Slice.SMPercent),
		zap.String("memory", gpu.FormatBytes(r.placement.Slice.MemoryBytes)), zap.Bool("emulated", r.emulated), zap.String("url", run.URL()))
	sink(r.id, fmt.Sprintf("placed on %s GPU %s with %d%% SM and %s", r.placement.Node, strings.Join(r.placement.GPUs, ","), r.placement.Slice.SMPercent, gpu.FormatBytes(r.placement.Slice.MemoryBytes)))
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
		"FAAS_GPU_MODEL="+fn.spec.GPU.Model,
	)
	return ReplicaSpec{
		ID:        r.id,
		Function:  dep.Service,
		Namespace: dep.Namespace,
		Process:   process,
		HTTPMode:  dep.EnvVars["mode"] == "http",
		Env:       env,
		WorkDir:   dir,
		Emulation: Emulation{Latency: b.cfg.Emulation.Latency, LoadTime: b.cfg.Emulation.LoadTime, Model: fn.spec.GPU.Model},
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

func (b *Backend) saveLocked(fn *function) error {
	rec := functionRecord{Function: fn.spec, Replicas: fn.desired, CreatedAt: fn.createdAt}
	for _, r := range fn.replicas {
		if r.placement != nil {
			rec.Placed = append(rec.Placed, replicaRecord{ID: r.id, Placement: *r.placement})
		}
	}
	return b.state.saveFunction(rec)
}

func newReplicaID(fn string) string {
	var buf [4]byte
	_, _ = rand.Read(buf[:])
	return fn + "-" + hex.EncodeToString(buf[:])
}

// List returns the functions of a namespace.
func (b *Backend) List(ctx context.Context, ns string) ([]types.FunctionStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.namespaces[ns]; !ok {
		return nil, &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist", ns)}
	}
	var out []types.FunctionStatus
	for _, fn := range b.sortedFunctionsLocked() {
		if fn.spec.Namespace() == ns {
			out = append(out, b.statusLocked(fn))
		}
	}
	return out, nil
}

// Status returns one function.
func (b *Backend) Status(ctx context.Context, ns, name string) (types.FunctionStatus, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		return types.FunctionStatus{}, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	return b.statusLocked(fn), nil
}

func (b *Backend) statusLocked(fn *function) types.FunctionStatus {
	dep := fn.spec.Deployment
	st := types.FunctionStatus{
		Name:                   dep.Service,
		Image:                  dep.Image,
		Namespace:              dep.Namespace,
		EnvProcess:             dep.EnvProcess,
		EnvVars:                dep.EnvVars,
		Constraints:            dep.Constraints,
		Secrets:                dep.Secrets,
		Annotations:            dep.Annotations,
		Limits:                 dep.Limits,
		Requests:               dep.Requests,
		ReadOnlyRootFilesystem: dep.ReadOnlyRootFilesystem,
		Replicas:               uint64(fn.desired),
		CreatedAt:              fn.createdAt,
	}
	labels := map[string]string{}
	if dep.Labels != nil {
		for k, v := range *dep.Labels {
			labels[k] = v
		}
	}
	if processOf(dep) == "" {
		labels[LabelEmulated] = "true"
	}
	if len(labels) > 0 {
		st.Labels = &labels
	}
	for _, r := range fn.replicas {
		if r.run != nil && r.run.Ready() {
			st.AvailableReplicas++
		}
	}
	return st
}

// ReadyEndpoints lists the replicas that answer requests now.
func (b *Backend) ReadyEndpoints(ns, name string) ([]scheduler.Endpoint, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn, ok := b.functions[key(ns, name)]
	if !ok {
		return nil, fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
	}
	eps := make([]scheduler.Endpoint, 0, len(fn.replicas))
	for _, r := range fn.replicas {
		if r.run != nil && r.run.Ready() {
			eps = append(eps, scheduler.Endpoint{ID: r.id, URL: r.run.URL(), InFlight: &r.inFlight})
		}
	}
	return eps, nil
}

// GPUReport describes every GPU, what is booked on it and what waits.
func (b *Backend) GPUReport(ctx context.Context) (scheduler.ClusterReport, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	type owner struct {
		fn *function
		r  *replica
	}
	owners := map[string]owner{}
	rep := scheduler.ClusterReport{Source: b.cfg.Inventory.Source, Emulated: b.cfg.Inventory.Emulated, Nodes: []scheduler.NodeReport{}, Pending: []scheduler.PendingEntry{}}
	for _, fn := range b.sortedFunctionsLocked() {
		for _, r := range fn.replicas {
			owners[r.id] = owner{fn, r}
			if r.placement == nil {
				rep.Pending = append(rep.Pending, scheduler.PendingEntry{ID: r.id, Function: fn.spec.Name(), Namespace: fn.spec.Namespace(), Reason: r.reason, Since: r.pendingSince})
			}
		}
	}
	nodeIdx := map[string]int{}
	for _, u := range b.alloc.Usage() {
		d := u.Device
		i, ok := nodeIdx[d.Node]
		if !ok {
			i = len(rep.Nodes)
			nodeIdx[d.Node] = i
			rep.Nodes = append(rep.Nodes, scheduler.NodeReport{Name: d.Node})
		}
		g := scheduler.GPUReport{UUID: d.UUID, Index: d.Index, Product: d.Product, MemoryBytes: d.MemoryBytes, SMCount: d.SMCount,
			SMAllocated: u.SMAllocated, MemoryAllocated: u.MemoryAllocated, Replicas: []scheduler.ReplicaReport{}}
		ids := make([]string, 0, len(u.Replicas))
		for id := range u.Replicas {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			s := u.Replicas[id]
			rr := scheduler.ReplicaReport{ID: id, SMPercent: s.SMPercent, MemoryBytes: s.MemoryBytes}
			if o, ok := owners[id]; ok {
				rr.Function, rr.Namespace = o.fn.spec.Name(), o.fn.spec.Namespace()
				rr.Ready = o.r.run != nil && o.r.run.Ready()
				rr.Emulated = o.r.emulated
			}
			g.Replicas = append(g.Replicas, rr)
		}
		rep.Nodes[i].GPUs = append(rep.Nodes[i].GPUs, g)
	}
	return rep, nil
}

// Query serves /system/logs.
func (b *Backend) Query(ctx context.Context, req logs.Request) (<-chan logs.Message, error) {
	return b.logs.Query(ctx, req)
}
