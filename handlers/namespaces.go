package handlers

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"
	"github.com/openfaas/faas-provider/types"
)

// NamespaceBackend keeps the namespaces functions may live in.
type NamespaceBackend interface {
	Namespaces(ctx context.Context) ([]string, error)
	GetNamespace(ctx context.Context, name string) (types.FunctionNamespace, error)
	CreateNamespace(ctx context.Context, ns types.FunctionNamespace) error
	UpdateNamespace(ctx context.Context, ns types.FunctionNamespace) error
	DeleteNamespace(ctx context.Context, name string) error
}

// MakeNamespacesHandler serves GET /system/namespaces; the UI takes the
// first element as its default, so the default namespace comes first.
func MakeNamespacesHandler(b NamespaceBackend) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		list, err := b.Namespaces(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, list)
	}
}

// MakeMutateNamespaceHandler serves /system/namespace/{name} for faas-cli's
// namespace commands: GET 200, POST 201, PUT and DELETE 202.
func MakeMutateNamespaceHandler(b NamespaceBackend) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := mux.Vars(r)["name"]
		var ns types.FunctionNamespace
		if r.Method == http.MethodPost || r.Method == http.MethodPut {
			if err := decodeBody(w, r, &ns); err != nil {
				writeError(w, err)
				return
			}
			if name == "" {
				name = ns.Name
			}
			if ns.Name != "" && ns.Name != name {
				writeError(w, badRequest("name", "%q does not match the path's %q", ns.Name, name))
				return
			}
		}
		if err := validateName("name", name); err != nil {
			writeError(w, err)
			return
		}
		ns.Name = name
		var err error
		code := http.StatusAccepted
		switch r.Method {
		case http.MethodGet:
			got, err := b.GetNamespace(r.Context(), name)
			if err != nil {
				writeError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, got)
			return
		case http.MethodPost:
			err, code = b.CreateNamespace(r.Context(), ns), http.StatusCreated
		case http.MethodPut:
			err = b.UpdateNamespace(r.Context(), ns)
		case http.MethodDelete:
			err = b.DeleteNamespace(r.Context(), name)
		default:
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(code)
	}
}
