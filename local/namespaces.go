package local

import (
	"context"
	"fmt"
	"io/fs"
	"sort"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/openfaas/faas-provider/types"
)

// Namespaces lists namespace names, the default first: the gateway UI
// selects the first one.
func (b *Backend) Namespaces(ctx context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := []string{DefaultNamespace}
	var rest []string
	for n := range b.namespaces {
		if n != DefaultNamespace {
			rest = append(rest, n)
		}
	}
	sort.Strings(rest)
	return append(out, rest...), nil
}

// GetNamespace returns one namespace.
func (b *Backend) GetNamespace(ctx context.Context, name string) (types.FunctionNamespace, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ns, ok := b.namespaces[name]
	if !ok {
		return types.FunctionNamespace{}, fmt.Errorf("namespace %s: %w", name, fs.ErrNotExist)
	}
	return ns, nil
}

// CreateNamespace adds a namespace, labelled for OpenFaaS as faasd and
// faas-netes expect.
func (b *Backend) CreateNamespace(ctx context.Context, ns types.FunctionNamespace) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.namespaces[ns.Name]; ok {
		return fmt.Errorf("namespace %s: %w", ns.Name, fs.ErrExist)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels["openfaas"] = "1"
	b.namespaces[ns.Name] = ns
	return b.saveNamespacesLocked(func() { delete(b.namespaces, ns.Name) })
}

// UpdateNamespace replaces a namespace's labels and annotations.
func (b *Backend) UpdateNamespace(ctx context.Context, ns types.FunctionNamespace) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.namespaces[ns.Name]
	if !ok {
		return fmt.Errorf("namespace %s: %w", ns.Name, fs.ErrNotExist)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels["openfaas"] = "1"
	b.namespaces[ns.Name] = ns
	return b.saveNamespacesLocked(func() { b.namespaces[ns.Name] = old })
}

// DeleteNamespace removes an empty namespace other than the default.
func (b *Backend) DeleteNamespace(ctx context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.namespaces[name]
	if !ok {
		return fmt.Errorf("namespace %s: %w", name, fs.ErrNotExist)
	}
	if name == DefaultNamespace {
		return &gpu.FieldError{Field: "name", Reason: "the default namespace cannot be removed"}
	}
	for _, v := range b.core.Functions() {
		if v.Spec.Namespace() == name {
			return &gpu.FieldError{Field: "name", Reason: fmt.Sprintf("namespace %s still has functions; remove them first", name)}
		}
	}
	delete(b.namespaces, name)
	return b.saveNamespacesLocked(func() { b.namespaces[name] = old })
}

// saveNamespacesLocked persists the namespaces, undoing the change in
// memory when the write fails so memory and disk agree.
func (b *Backend) saveNamespacesLocked(undo func()) error {
	if err := b.state.saveNamespaces(b.namespaces); err != nil {
		undo()
		return err
	}
	return nil
}
