package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultNamespace is where functions go when a client names none.
const DefaultNamespace = "openfaas-fn"

// maxBodyBytes bounds every JSON request body; Kubernetes refuses Secrets
// over 1 MiB, so a larger body is a mistake, not data to keep.
const maxBodyBytes = 1 << 20

// decodeBody reads a JSON body into v, rejecting bodies over the limit and
// trailing garbage.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	if r.Body == nil {
		return badRequest("body", "a JSON body is required")
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("body: larger than %d bytes: %w", maxBodyBytes, mbe)
		}
		return badRequest("body", "reading it failed: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return badRequest("body", "a JSON body is required")
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return badRequest(te.Field, "expected a JSON %s, got %s", te.Type, te.Value)
		}
		return badRequest("body", "not valid JSON: %v", err)
	}
	return nil
}

// namespaceOf follows what the clients do: faas-cli sends the namespace in
// the body, the gateway and the UI in the query string; the query wins.
func namespaceOf(r *http.Request, body string) (string, error) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = body
	}
	if ns == "" {
		return DefaultNamespace, nil
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return "", badRequest("namespace", "%q is not a valid name: %s", ns, strings.Join(errs, "; "))
	}
	return ns, nil
}

// validateName checks a function name is an RFC 1123 label, as Kubernetes
// needs for the objects named after it.
func validateName(field, name string) error {
	if name == "" {
		return badRequest(field, "is required")
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return badRequest(field, "%q is not a valid name: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// splitFunctionName splits the proxy's "fn.namespace" form.
func splitFunctionName(s string) (name, namespace string) {
	if i := strings.LastIndex(s, "."); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}
