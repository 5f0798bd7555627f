// Package handlers serves the OpenFaaS provider API on top of a backend: it
// validates requests, maps backend errors to the status codes the gateway
// and faas-cli expect, and proxies invocations to ready replicas.
package handlers

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// Backends report "not found" and "already exists" by wrapping fs.ErrNotExist
// and fs.ErrExist, so handlers need not import them to map status codes.
func statusOf(err error) int {
	var fe *gpu.FieldError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.As(err, &fe):
		return http.StatusBadRequest
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrExist):
		return http.StatusConflict
	default:
		return http.StatusInternalServerError
	}
}

func writeError(w http.ResponseWriter, err error) {
	http.Error(w, err.Error(), statusOf(err))
}

func badRequest(field, format string, args ...any) error {
	return &gpu.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
