package k8s

import (
	"context"
	"fmt"
	"io/fs"
	"sort"

	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"
)

// Secrets are Kubernetes Secrets labelled as faas-netes labels the ones it
// makes (app.kubernetes.io/managed-by=openfaas), one key named after the
// secret, so a function reads /var/openfaas/secrets/<name>. Any instance,
// leader or not, serves them: they book no GPU.

func secretData(s types.Secret) map[string][]byte {
	v := s.RawValue
	if len(v) == 0 {
		v = []byte(s.Value)
	}
	return map[string][]byte{s.Name: v}
}

// ListSecrets names the secrets made through the API; values never leave.
func (b *Backend) ListSecrets(ctx context.Context, ns string) ([]types.Secret, error) {
	if err := b.checkNamespace(ns); err != nil {
		return nil, err
	}
	list, err := b.secrets.in(ns).Secrets(ns).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("list secrets of %s: %w", ns, err)
	}
	out := make([]types.Secret, 0, len(list))
	for _, s := range list {
		out = append(out, types.Secret{Name: s.Name, Namespace: ns})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// CreateSecret makes a Secret; one that exists is an error wrapping
// fs.ErrExist (409, which faas-cli reports as "already exists").
func (b *Backend) CreateSecret(ctx context.Context, s types.Secret) error {
	if err := b.checkNamespace(s.Namespace); err != nil {
		return err
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: map[string]string{LabelManagedBy: secretManagedBy}},
		Type:       corev1.SecretTypeOpaque,
		Data:       secretData(s),
	}
	_, err := b.client.CoreV1().Secrets(s.Namespace).Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("secret with the name %s already exists: %w", s.Name, fs.ErrExist)
	}
	if err != nil {
		return fmt.Errorf("create secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// UpdateSecret replaces a Secret's value; pods see it when the kubelet
// refreshes the projected volume.
func (b *Backend) UpdateSecret(ctx context.Context, s types.Secret) error {
	api := b.client.CoreV1().Secrets(s.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Data = secretData(s)
		cur.StringData = nil
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("secret %s: %w", s.Name, fs.ErrNotExist)
	}
	if err != nil {
		return fmt.Errorf("update secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// DeleteSecret removes a Secret.
func (b *Backend) DeleteSecret(ctx context.Context, ns, name string) error {
	err := b.client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("secret %s: %w", name, fs.ErrNotExist)
	}
	if err != nil {
		return fmt.Errorf("delete secret %s/%s: %w", ns, name, err)
	}
	return nil
}
