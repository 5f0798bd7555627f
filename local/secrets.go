package local

import (
	"context"
	"fmt"
	"io/fs"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/openfaas/faas-provider/types"
)

func secretValue(s types.Secret) []byte {
	if len(s.RawValue) > 0 {
		return s.RawValue
	}
	return []byte(s.Value)
}

// ListSecrets names the secrets of a namespace; values never leave.
func (b *Backend) ListSecrets(ctx context.Context, ns string) ([]types.Secret, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.namespaces[ns]; !ok {
		return nil, &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist", ns)}
	}
	names, err := b.state.listSecrets(ns)
	if err != nil {
		return nil, err
	}
	out := make([]types.Secret, 0, len(names))
	for _, n := range names {
		out = append(out, types.Secret{Name: n, Namespace: ns})
	}
	return out, nil
}

// CreateSecret stores a new secret; a duplicate is an error wrapping
// fs.ErrExist (409).
func (b *Backend) CreateSecret(ctx context.Context, s types.Secret) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.namespaces[s.Namespace]; !ok {
		return &gpu.FieldError{Field: "namespace", Reason: fmt.Sprintf("%q does not exist", s.Namespace)}
	}
	if b.state.secretExists(s.Namespace, s.Name) {
		return fmt.Errorf("secret with the name %s already exists: %w", s.Name, fs.ErrExist)
	}
	return b.state.writeSecret(s.Namespace, s.Name, secretValue(s))
}

// UpdateSecret replaces a secret's value. Replicas see it when they next
// start, as with a Kubernetes Secret mounted into a restarted pod.
func (b *Backend) UpdateSecret(ctx context.Context, s types.Secret) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.state.secretExists(s.Namespace, s.Name) {
		return fmt.Errorf("secret %s: %w", s.Name, fs.ErrNotExist)
	}
	return b.state.writeSecret(s.Namespace, s.Name, secretValue(s))
}

// DeleteSecret removes a secret.
func (b *Backend) DeleteSecret(ctx context.Context, ns, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.state.secretExists(ns, name) {
		return fmt.Errorf("secret %s: %w", name, fs.ErrNotExist)
	}
	if err := b.state.deleteSecret(ns, name); err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	return nil
}
