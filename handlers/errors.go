// Package handlers serves the OpenFaaS provider API on top of a backend: it
// validates requests, maps backend errors to the status codes the gateway
// and faas-cli expect, and proxies invocations to ready replicas.
package handlers

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// retryLater is implemented by backend errors that refuse a request for
// now only (a standby instance while another one leads): they are
// answered 503 with Retry-After, so a client tries again instead of
// reporting a failure.
type retryLater interface {
	RetryAfter() time.Duration
}

// Backends report "not found" and "already exists" by wrapping fs.ErrNotExist
// and fs.ErrExist, so handlers need not import them to map status codes.
func statusOf(err error) int {
	var fe *gpu.FieldError
	var mbe *http.MaxBytesError
	var rl retryLater
	switch {
	case errors.As(err, &rl):
		return http.StatusServiceUnavailable
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
	var rl retryLater
	if errors.As(err, &rl) {
		// Retry-After is in whole seconds; never 0, which asks for a
		// retry at once.
		secs := max(int(math.Ceil(rl.RetryAfter().Seconds())), 1)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	http.Error(w, err.Error(), statusOf(err))
}

func badRequest(field, format string, args ...any) error {
	return &gpu.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
