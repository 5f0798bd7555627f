package k8s

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
)

// Function namespaces are Kubernetes namespaces labelled openfaas=1, as
// faas-netes and faasd mark them; the default namespace always counts.

// Namespaces lists them, the default first: the gateway UI selects the
// first one.
func (b *Backend) Namespaces(ctx context.Context) ([]string, error) {
	if !b.scope.clusterWide {
		return defaultFirst(b.scope.namespaces), nil
	}
	list, err := b.namespaces.List(labels.SelectorFromSet(labels.Set{LabelNamespace: "1"}))
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	out := []string{DefaultNamespace}
	var rest []string
	for _, n := range list {
		if n.Name != DefaultNamespace && n.DeletionTimestamp == nil {
			rest = append(rest, n.Name)
		}
	}
	sort.Strings(rest)
	return append(out, rest...), nil
}

func defaultFirst(ns []string) []string {
	out := append([]string(nil), ns...)
	sort.SliceStable(out, func(i, j int) bool { return out[i] == DefaultNamespace && out[j] != DefaultNamespace })
	return out
}

// fixedScope refuses namespace changes a fixed scope cannot follow.
func (b *Backend) fixedScope(verb string) error {
	if b.scope.clusterWide {
		return nil
	}
	return &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("cannot %s namespaces: the provider's function namespaces are fixed (%s; -k8s-function-namespaces)", verb, strings.Join(b.scope.namespaces, ", "))}
}

// GetNamespace returns one function namespace.
func (b *Backend) GetNamespace(ctx context.Context, name string) (types.FunctionNamespace, error) {
	if !b.scope.clusterWide && !b.scope.has(name) {
		return types.FunctionNamespace{}, fmt.Errorf("namespace %s: %w", name, fs.ErrNotExist)
	}
	n, err := b.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && b.scope.clusterWide && name != DefaultNamespace && n.Labels[LabelNamespace] != "1" {
		return types.FunctionNamespace{}, fmt.Errorf("namespace %s: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return types.FunctionNamespace{}, fmt.Errorf("namespace %s: %w", name, err)
	}
	return types.FunctionNamespace{Name: n.Name, Labels: userLabels(n.Labels), Annotations: n.Annotations}, nil
}

// userLabels hides the labels Kubernetes sets itself.
func userLabels(in map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		if !strings.HasPrefix(k, "kubernetes.io/") {
			out[k] = v
		}
	}
	return out
}

// CreateNamespace makes a namespace labelled openfaas=1.
func (b *Backend) CreateNamespace(ctx context.Context, ns types.FunctionNamespace) error {
	if err := b.fixedScope("create"); err != nil {
		return err
	}
	lbl := merge(nil, ns.Labels)
	lbl[LabelNamespace] = "1"
	obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, Labels: lbl, Annotations: ns.Annotations}}
	_, err := b.client.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns.Name, fs.ErrExist)
	}
	if apierrors.IsInvalid(err) {
		return &gpu.FieldError{Field: "labels", Reason: err.Error()}
	}
	if err != nil {
		return fmt.Errorf("create namespace %s: %w", ns.Name, err)
	}
	return nil
}

// UpdateNamespace replaces a function namespace's labels and annotations,
// keeping openfaas=1 and what Kubernetes set.
func (b *Backend) UpdateNamespace(ctx context.Context, ns types.FunctionNamespace) error {
	api := b.client.CoreV1().Namespaces()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, ns.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if b.scope.clusterWide && ns.Name != DefaultNamespace && cur.Labels[LabelNamespace] != "1" || !b.scope.clusterWide && !b.scope.has(ns.Name) {
			return apierrors.NewNotFound(corev1.Resource("namespaces"), ns.Name)
		}
		lbl := map[string]string{}
		for k, v := range cur.Labels {
			if strings.HasPrefix(k, "kubernetes.io/") {
				lbl[k] = v
			}
		}
		lbl = merge(lbl, ns.Labels)
		lbl[LabelNamespace] = "1"
		cur.Labels, cur.Annotations = lbl, ns.Annotations
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("namespace %s: %w", ns.Name, fs.ErrNotExist)
	case apierrors.IsInvalid(err):
		return &gpu.FieldError{Field: "labels", Reason: err.Error()}
	case err != nil:
		return fmt.Errorf("update namespace %s: %w", ns.Name, err)
	}
	return nil
}

// DeleteNamespace removes an empty function namespace other than the
// default.
func (b *Backend) DeleteNamespace(ctx context.Context, name string) error {
	if _, err := b.GetNamespace(ctx, name); err != nil {
		return err
	}
	if name == DefaultNamespace {
		return &gpu.FieldError{Field: "name", Reason: "the default namespace cannot be removed"}
	}
	if err := b.fixedScope("remove"); err != nil {
		return err
	}
	if svcs, _ := b.svcs.in(name).Services(name).List(labels.Everything()); len(svcs) > 0 {
		return &gpu.FieldError{Field: "name", Reason: fmt.Sprintf("namespace %s still has functions; remove them first", name)}
	}
	err := b.client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("namespace %s: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}
