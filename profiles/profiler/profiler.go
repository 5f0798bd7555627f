package profiler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/openfaas/faas-provider/types"
)

// cleanupTimeout bounds removing what a run created once the run itself
// has ended, Ctrl-C included.
const cleanupTimeout = time.Minute

// Measurement is one (SM %, batch) slice measured.
type Measurement struct {
	SM, Batch int
	// Latency is the phase with one batch in flight: no request queues
	// behind another, so its latency is the slice's own.
	Latency Stats
	// Load is the phase with Options.Concurrency in flight (at least the
	// batch): throughput and tail latency under load. It is Latency when
	// Concurrency does not exceed the batch.
	Load Stats
	// Ready is how long the copy took from deploy to ready.
	Ready time.Duration
}

// Result is a finished profiling run.
type Result struct {
	Function, Namespace string
	Model, GPU          string
	Duration            time.Duration // per phase
	Finished            time.Time
	Points              []Measurement
	// Splits are each batch's host and GPU parts fitted on the measured
	// SM shares (profiles.Split; a batch measured at fewer than
	// profiles.MinSplitPoints shares has none): what the simulator's
	// contention model reads of a profile.
	Splits []profiles.Split
}

// Run profiles o.Function through api: for each batch and SM %, one
// temporary copy at a time is deployed, waited for, measured and removed.
// Whatever it created is removed before it returns, on success, error or
// cancellation (ctx: Ctrl-C), with a context of its own.
func Run(ctx context.Context, api API, o Options) (res Result, err error) {
	o, err = o.withDefaults()
	if err != nil {
		return Result{}, err
	}
	r := &run{api: api, o: o, pr: newProgress(o.Progress, o.ProgressEvery), created: map[string]bool{}}
	defer func() {
		if cerr := r.cleanup(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()

	orig, err := api.Function(ctx, o.Function, o.Namespace)
	if errors.Is(err, ErrNotFound) {
		return Result{}, fmt.Errorf("%w: deploy it first, or check --namespace", err)
	}
	if err != nil {
		return Result{}, err
	}
	if copyOf := labelOf(orig, LabelCopyOf); copyOf != "" {
		return Result{}, fmt.Errorf("function %s is a temporary copy of %s made by faas-gpu profile: profile %s", orig.Name, copyOf, copyOf)
	}
	r.ns = orig.Namespace
	if r.ns == "" {
		r.ns = o.Namespace
	}
	if o.GPU == "" {
		// Before anything is deployed: a run that cannot name the GPU
		// product cannot write a profile.
		if _, err := api.GPUs(ctx); err != nil {
			if errors.Is(err, ErrNoGPUReport) {
				return Result{}, fmt.Errorf("cannot learn the GPU product: %w (an OpenFaaS gateway does not forward it): pass --gpu PRODUCT, or point --gateway at the faas-gpu provider", err)
			}
			return Result{}, err
		}
	}

	res = Result{Function: orig.Name, Namespace: r.ns, Model: o.Model, GPU: o.GPU, Duration: o.Duration}
	if res.Model == "" {
		res.Model = ModelOf(orig)
	}
	r.pr.printf("profiling %s (model %s) at sm %v%% batch %v: about %s of measuring plus deployments",
		orig.Name, res.Model, o.SMs, o.Batches, o.estimate())
	if o.Batches[len(o.Batches)-1] > 1 {
		r.pr.printf("warning: faas-gpu's backends give a replica of a fixed SM %% FAAS_GPU_BATCH=1 over the copy's own; " +
			"unless this provider passes the copy's through, points above batch 1 measure batch 1 with more requests in flight (docs/profiling.md)")
	}
	if len(o.SMs) < profiles.MinSplitPoints {
		r.pr.printf("warning: %d SM shares: splitting latency into host and GPU parts needs at least %d (docs/profiles.md); "+
			"the simulator then counts the whole latency as GPU work", len(o.SMs), profiles.MinSplitPoints)
	}
	for _, batch := range o.Batches {
		for _, sm := range o.SMs {
			m, err := r.measure(ctx, orig, sm, batch)
			if err != nil {
				return Result{}, err
			}
			res.Points = append(res.Points, m)
		}
	}
	if res.GPU == "" {
		res.GPU = r.product
	}
	res.Splits = splits(res.Points, o.Batches)
	for _, s := range res.Splits {
		r.pr.printf("batch %d: host %.2f ms + GPU %.2f ms x 100/sm (fit error %.1f %% rms, %.1f %% at worst)",
			s.Batch, s.HostMs, s.GPUMs, 100*s.RMSError, 100*s.MaxError)
	}
	res.Finished = time.Now()
	return res, nil
}

// splits fits the host and GPU parts of each batch measured at enough SM
// shares, on the p50 latencies the profile is written with.
func splits(ms []Measurement, batches []int) []profiles.Split {
	p := profiles.Profile{}
	for _, m := range ms {
		p.Points = append(p.Points, profiles.Point{Batch: m.Batch, SM: m.SM, Quota: profiles.FullQuota, Latency: milliseconds(m.Latency.P50)})
	}
	var out []profiles.Split
	for _, b := range batches {
		if s, err := p.Split(b); err == nil {
			out = append(out, s)
		}
	}
	return out
}

// run is one Run's state.
type run struct {
	api API
	o   Options
	pr  *progress
	ns  string

	product     string // GPU product of the first copy's placement
	productFrom string // which copy it came from, for the mismatch error

	mu      sync.Mutex
	created map[string]bool // copies deployed and not yet seen removed
}

func (r *run) track(name string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.created[name] = true
	} else {
		delete(r.created, name)
	}
}

// measure deploys the copy of one slice, measures it and removes it.
func (r *run) measure(ctx context.Context, orig types.FunctionStatus, sm, batch int) (Measurement, error) {
	label := fmt.Sprintf("sm %d%%", sm)
	if len(r.o.Batches) > 1 || batch != 1 {
		label += fmt.Sprintf(" batch %d", batch)
	}
	name, err := copyName(orig.Name, sm, batch)
	if err != nil {
		return Measurement{}, err
	}
	if err := r.clearLeftover(ctx, orig.Name, name); err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", label, err)
	}
	dep := copyDeployment(orig, name, sm, batch)
	dep.Namespace = r.ns
	r.pr.printf("%s: deploying %s", label, name)
	// Tracked before the call: a deploy the provider applied but whose
	// answer was lost to Ctrl-C must still be removed.
	r.track(name, true)
	start := time.Now()
	if err := r.api.Deploy(ctx, dep); err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", label, err)
	}
	if err := r.waitReady(ctx, name); err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", label, err)
	}
	m := Measurement{SM: sm, Batch: batch, Ready: time.Since(start)}
	product, err := r.placedOn(ctx, name)
	if err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", label, err)
	}
	r.pr.printf("%s: %s ready after %s on %s", label, name, seconds(m.Ready.Round(100*time.Millisecond)), product)

	send := func(ctx context.Context) error {
		return r.api.Invoke(ctx, name, r.ns, r.o.Body, r.o.ContentType)
	}
	// One batch in flight: nothing queues, the latency is the slice's.
	m.Latency, err = drive(ctx, send, phase{Label: label, InFlight: batch, Warmup: r.o.Warmup, Window: r.o.Duration}, r.pr)
	if err != nil {
		return Measurement{}, err
	}
	m.Load = m.Latency
	if r.o.phases(batch) == 2 {
		m.Load, err = drive(ctx, send, phase{Label: label, InFlight: r.o.Concurrency, Window: r.o.Duration}, r.pr)
		if err != nil {
			return Measurement{}, err
		}
	}
	if err := r.remove(ctx, name); err != nil {
		return Measurement{}, fmt.Errorf("%s: %w", label, err)
	}
	return m, nil
}

// clearLeftover removes a copy an interrupted run left under name, and
// refuses to touch a function of that name that is not one.
func (r *run) clearLeftover(ctx context.Context, function, name string) error {
	st, err := r.api.Function(ctx, name, r.ns)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !isCopyOf(st, function) {
		return fmt.Errorf("function %s exists and is not a copy made by faas-gpu profile: remove or rename it", name)
	}
	r.pr.printf("removing %s, left by an earlier run", name)
	r.track(name, true)
	return r.remove(ctx, name)
}

// waitReady polls until the copy has a ready replica.
func (r *run) waitReady(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.ReadyTimeout)
	defer cancel()
	t := time.NewTicker(r.o.Poll)
	defer t.Stop()
	for {
		st, err := r.api.Function(ctx, name, r.ns)
		switch {
		case err == nil && st.AvailableReplicas > 0:
			return nil
		case errors.Is(err, ErrNotFound):
			return fmt.Errorf("%s disappeared while waiting for it to be ready", name)
		case err != nil && ctx.Err() == nil:
			return err
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return r.notReady(name)
			}
			return ctx.Err()
		}
	}
}

// notReady explains a copy that did not become ready in time, with the
// scheduler's reason when the provider reports one.
func (r *run) notReady(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	msg := fmt.Sprintf("%s not ready after %s", name, r.o.ReadyTimeout)
	if rep, err := r.api.GPUs(ctx); err == nil {
		if reason := rep.PendingReason(name, r.ns); reason != "" {
			msg += ": pending: " + reason
		}
	}
	return errors.New(msg)
}

// placedOn is the GPU product the copy runs on (Options.GPU when given).
// All copies must land on one product: a profile describes one.
func (r *run) placedOn(ctx context.Context, name string) (string, error) {
	if r.o.GPU != "" {
		return r.o.GPU, nil
	}
	rep, err := r.api.GPUs(ctx)
	if err != nil {
		return "", err
	}
	product, ok := rep.ProductOf(name, r.ns)
	if !ok {
		return "", fmt.Errorf("%s is ready but /system/gpus shows no replica of it: pass --gpu PRODUCT", name)
	}
	if r.product == "" {
		r.product, r.productFrom = product, name
	} else if product != r.product {
		return "", fmt.Errorf("%s runs on %s but %s ran on %s: a profile describes one GPU product; pin the function to one with constraints, or pass --gpu", name, product, r.productFrom, r.product)
	}
	return product, nil
}

// remove deletes a copy and waits until the provider no longer lists it,
// so the next copy never shares the GPU with it.
func (r *run) remove(ctx context.Context, name string) error {
	if err := r.api.Delete(ctx, name, r.ns); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.ReadyTimeout)
	defer cancel()
	t := time.NewTicker(r.o.Poll)
	defer t.Stop()
	for {
		_, err := r.api.Function(ctx, name, r.ns)
		if errors.Is(err, ErrNotFound) {
			r.track(name, false)
			r.pr.printf("removed %s", name)
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%s still listed after delete: %w", name, ctx.Err())
		}
	}
}

// cleanup removes every copy still tracked, on a fresh context: the run's
// own may be cancelled already.
func (r *run) cleanup() error {
	r.mu.Lock()
	names := make([]string, 0, len(r.created))
	for n := range r.created {
		names = append(names, n)
	}
	r.mu.Unlock()
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var failed []string
	var errs []error
	for _, n := range names {
		if err := r.remove(ctx, n); err != nil {
			failed = append(failed, n)
			errs = append(errs, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("temporary functions left behind, remove them by hand (faas-cli remove): %v: %w", failed, errors.Join(errs...))
	}
	return nil
}

func labelOf(st types.FunctionStatus, key string) string {
	if st.Labels == nil {
		return ""
	}
	return (*st.Labels)[key]
}
