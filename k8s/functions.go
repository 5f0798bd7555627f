package k8s

import (
	"context"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Deploy creates a function: its record, its initial replicas placed on
// the GPUs with room (the rest pending), their Deployments and GPU
// reservations. Only the leader deploys.
func (b *Backend) Deploy(ctx context.Context, spec scheduler.Function) error {
	if err := b.checkSpec(ctx, spec); err != nil {
		return err
	}
	k := fnKey(spec.Namespace(), spec.Name())
	return b.change(ctx, k, func(st *state, now time.Time) (lifecycle.Result, error) {
		res, err := st.core.Deploy(spec, now)
		if err == nil {
			if v, ok := st.core.Function(k); ok {
				b.log.Info("slice chosen", zap.String("function", spec.Name()), zap.String("namespace", spec.Namespace()), zap.String("decision", v.Plan.Decision))
			}
			b.warnParked(spec)
		}
		return res, err
	})
}

// Update replaces a function's spec: every replica drains and is placed
// afresh (lifecycle.Core.Update), so old and new never share a GPU beyond
// it.
func (b *Backend) Update(ctx context.Context, spec scheduler.Function) error {
	if err := b.checkSpec(ctx, spec); err != nil {
		return err
	}
	return b.change(ctx, fnKey(spec.Namespace(), spec.Name()), func(st *state, now time.Time) (lifecycle.Result, error) {
		res, err := st.core.Update(spec, now)
		if err == nil {
			b.warnParked(spec)
		}
		return res, err
	})
}

// warnParked says that a function's parked pods are not kept without
// -k8s-parked: a parked pod sees every GPU faas-gpu holds on its node,
// so the installation turns them on (docs/kubernetes.md, "Parked pods").
func (b *Backend) warnParked(spec scheduler.Function) {
	if spec.Scale.ParkedAsked() != "" && !b.cfg.Parked {
		b.log.Warn("function asks for parked processes, which this installation does not keep (-k8s-parked): none kept",
			zap.String("function", spec.Name()), zap.String("namespace", spec.Namespace()), zap.String("parked", spec.Scale.ParkedAsked()))
	}
}

// Delete removes a function and all its objects; its GPU shares and
// reservations are freed as its pods stop.
func (b *Backend) Delete(ctx context.Context, ns, name string) error {
	return b.change(ctx, fnKey(ns, name), func(st *state, now time.Time) (lifecycle.Result, error) {
		return st.core.Delete(ns, name, now)
	})
}

// Scale sets the desired replica count, inside the function's bounds.
func (b *Backend) Scale(ctx context.Context, ns, name string, replicas int) error {
	return b.change(ctx, fnKey(ns, name), func(st *state, now time.Time) (lifecycle.Result, error) {
		res, set, err := st.core.Scale(ns, name, replicas, now)
		if err == nil && set != replicas {
			b.log.Info("replica count clamped to the function's scale bounds", zap.String("function", name), zap.Int("asked", replicas), zap.Int("set", set))
		}
		return res, err
	})
}

// change runs one core operation on the leader's state and waits until
// the writer has written function k, so the caller sees its objects. A
// change that cannot be written is undone (txn.go) and answers the write's
// error, so a retry starts from where the function was. Other functions
// the operation placed are queued for writing once k's write is answered.
func (b *Backend) change(ctx context.Context, k string, op func(*state, time.Time) (lifecycle.Result, error)) error {
	b.txMu.Lock()
	defer b.txMu.Unlock()
	now := time.Now()
	b.mu.Lock()
	st, w := b.st, b.w
	if st == nil || !b.leading || w == nil {
		b.mu.Unlock()
		return b.standbyError()
	}
	began := time.Now()
	res, err := op(st, now)
	if err != nil {
		b.mu.Unlock()
		return err
	}
	seq := b.writeSeq
	others := st.apply(res, time.Since(began), now)
	delete(others, k)
	if b.held == nil {
		b.held = map[string]bool{}
	}
	for o := range others {
		b.held[o] = true
	}
	b.mu.Unlock()
	err = w.write(ctx, k)
	b.mu.Lock()
	for o := range others {
		delete(b.held, o)
	}
	if b.st == st {
		if err != nil {
			st.abort(res, func(ns, group string) bool { return b.lastWrite[fnKey(ns, group)] > seq })
			b.log.Warn("a change could not be written; undone", zap.String("function", k), zap.Error(err))
			// Written again as it was, so nothing of the change stays in the
			// cluster: not what a failed write did before failing, nor a write
			// still under way when the caller gave up waiting.
			w.add(k)
		}
		b.enqueueLocked(sortedKeys(others)...)
	}
	b.mu.Unlock()
	if err != nil {
		b.kick() // room freed by the undo may place another function
		return fmt.Errorf("function %s not changed: %w", k, err)
	}
	return nil
}

// checkSpec rejects a function whose namespace is not OpenFaaS's or whose
// secrets do not exist, as faas-netes does.
func (b *Backend) checkSpec(ctx context.Context, spec scheduler.Function) error {
	if err := b.checkNamespace(spec.Namespace()); err != nil {
		return err
	}
	// The informers see only faas-gpu's Services: ask the API server.
	if svc, err := b.client.CoreV1().Services(spec.Namespace()).Get(ctx, spec.Name(), metav1.GetOptions{}); err == nil && svc.Labels[LabelManagedBy] != managedBy {
		return &gpu.FieldError{Field: "service", Reason: fmt.Sprintf("a Service %s/%s exists that faas-gpu did not make; remove it or choose another name", spec.Namespace(), spec.Name())}
	}
	for _, s := range spec.Deployment.Secrets {
		_, err := b.client.CoreV1().Secrets(spec.Namespace()).Get(ctx, s, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return &gpu.FieldError{Field: "secrets", Reason: fmt.Sprintf("secret %q not found in namespace %s", s, spec.Namespace())}
		}
		if err != nil {
			return fmt.Errorf("secret %s/%s: %w", spec.Namespace(), s, err)
		}
	}
	return nil
}

// checkNamespace accepts the default namespace and namespaces labelled
// openfaas=1.
func (b *Backend) checkNamespace(ns string) error {
	if !b.scope.clusterWide {
		if b.scope.has(ns) {
			return nil
		}
		return &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q is not a function namespace (%s)", ns, strings.Join(b.scope.namespaces, ", "))}
	}
	if ns == DefaultNamespace {
		return nil
	}
	n, err := b.namespaces.Get(ns)
	if err != nil || n.Labels[LabelNamespace] != "1" {
		return &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist or is not labelled %s=1", ns, LabelNamespace)}
	}
	return nil
}

// read runs f on the decisions: the leader's own, or on a standby a copy
// rebuilt from the informers (at most a second old).
func (b *Backend) read(f func(st *state)) {
	b.mu.Lock()
	if b.st != nil {
		defer b.mu.Unlock()
		f(b.st)
		return
	}
	b.mu.Unlock()
	b.viewMu.Lock()
	defer b.viewMu.Unlock()
	now := time.Now()
	if b.view == nil || now.Sub(b.viewTime) > time.Second {
		b.view, _ = restoreState(b.listerObjects(now), b.coreOptions(), now, zap.NewNop())
		b.viewTime = now
	}
	f(b.view)
}

// coreOptions are the lifecycle core's settings for this backend.
func (b *Backend) coreOptions() lifecycle.Options {
	o := coreOptions(b.cfg.Profiles, b.cfg.Autoscale)
	o.WarmTTL = b.cfg.WarmTTL
	// Without warm pods a replica taken out of service stops, as before.
	o.NoWarm = !b.cfg.WarmReplicas
	o.NoConsolidate = b.cfg.NoConsolidate
	o.NoStandby = b.cfg.NoStandby
	if b.cfg.Parked {
		o.CanPark = canPark
	}
	return o
}

// List returns the functions of a namespace.
func (b *Backend) List(ctx context.Context, ns string) ([]types.FunctionStatus, error) {
	if err := b.checkNamespace(ns); err != nil {
		return nil, err
	}
	var out []types.FunctionStatus
	b.read(func(st *state) {
		for _, v := range st.core.Functions() {
			if v.Spec.Namespace() == ns {
				out = append(out, b.status(v))
			}
		}
	})
	return out, nil
}

// Status returns one function.
func (b *Backend) Status(ctx context.Context, ns, name string) (types.FunctionStatus, error) {
	var st types.FunctionStatus
	found := false
	b.read(func(s *state) {
		if v, ok := s.core.Function(fnKey(ns, name)); ok {
			st, found = b.status(v), true
		}
	})
	if !found {
		return st, notFound(ns, name)
	}
	return st, nil
}

// status is the OpenFaaS view of function v: replicas desired, and
// available the function's pods that are Ready and in routing (a warm
// replica's pod is not: the gateway must scale a function at zero up).
func (b *Backend) status(v lifecycle.FunctionView) types.FunctionStatus {
	dep := v.Spec.Deployment
	ready := 0
	for _, p := range b.functionPods(dep.Namespace, dep.Service) {
		if podReady(p) && !podWarm(p) {
			ready++
		}
	}
	return types.FunctionStatus{
		Name: dep.Service, Image: dep.Image, Namespace: dep.Namespace, EnvProcess: dep.EnvProcess, EnvVars: dep.EnvVars,
		Constraints: dep.Constraints, Secrets: dep.Secrets, Labels: dep.Labels, Annotations: dep.Annotations,
		Limits: dep.Limits, Requests: dep.Requests, ReadOnlyRootFilesystem: dep.ReadOnlyRootFilesystem,
		Replicas: uint64(v.Desired), AvailableReplicas: uint64(ready), CreatedAt: v.CreatedAt,
	}
}

func notFound(ns, name string) error {
	return fmt.Errorf("function %s.%s: %w", name, ns, fs.ErrNotExist)
}
