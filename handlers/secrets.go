package handlers

import (
	"context"
	"net/http"
	"strings"

	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SecretBackend stores secrets. Values are never listed back.
type SecretBackend interface {
	ListSecrets(ctx context.Context, namespace string) ([]types.Secret, error)
	CreateSecret(ctx context.Context, s types.Secret) error
	UpdateSecret(ctx context.Context, s types.Secret) error
	DeleteSecret(ctx context.Context, namespace, name string) error
}

// MakeSecretsHandler serves GET, POST, PUT and DELETE /system/secrets.
// Mutations answer 202, which every faas-cli version accepts.
func MakeSecretsHandler(b SecretBackend, log *zap.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			ns, err := namespaceOf(r, "")
			if err != nil {
				writeError(w, err)
				return
			}
			list, err := b.ListSecrets(r.Context(), ns)
			if err != nil {
				writeError(w, err)
				return
			}
			if list == nil {
				list = []types.Secret{}
			}
			writeJSON(w, http.StatusOK, list)
			return
		}
		var s types.Secret
		if err := decodeBody(w, r, &s); err != nil {
			writeError(w, err)
			return
		}
		if s.Name == "" {
			writeError(w, badRequest("name", "is required"))
			return
		}
		if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
			writeError(w, badRequest("name", "%q is not a valid secret name: %s", s.Name, strings.Join(errs, "; ")))
			return
		}
		ns, err := namespaceOf(r, s.Namespace)
		if err != nil {
			writeError(w, err)
			return
		}
		s.Namespace = ns
		switch r.Method {
		case http.MethodPost, http.MethodPut:
			if s.Value == "" && len(s.RawValue) == 0 {
				writeError(w, badRequest("value", "a secret needs a value or a rawValue"))
				return
			}
			if r.Method == http.MethodPost {
				err = b.CreateSecret(r.Context(), s)
			} else {
				err = b.UpdateSecret(r.Context(), s)
			}
		case http.MethodDelete:
			err = b.DeleteSecret(r.Context(), ns, s.Name)
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		log.Info("secret "+strings.ToLower(r.Method), zap.String("secret", s.Name), zap.String("namespace", ns))
		w.WriteHeader(http.StatusAccepted)
	}
}
