package handlers

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// notNow is a refusal that may succeed later, as a standby's.
type notNow struct{ after time.Duration }

func (e notNow) Error() string             { return "a standby; the leader places replicas" }
func (e notNow) RetryAfter() time.Duration { return e.after }

func TestWriteErrorMapsStatusAndRetryAfter(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        error
		code       int
		retryAfter string
	}{
		{"refused for now, wrapped", fmt.Errorf("function f: %w", notNow{2 * time.Second}), http.StatusServiceUnavailable, "2"},
		{"under a second rounds up", notNow{200 * time.Millisecond}, http.StatusServiceUnavailable, "1"},
		{"no delay still waits a second", notNow{0}, http.StatusServiceUnavailable, "1"},
		{"part seconds round up", notNow{2500 * time.Millisecond}, http.StatusServiceUnavailable, "3"},
		{"bad field", &gpu.FieldError{Field: "x", Reason: "bad"}, http.StatusBadRequest, ""},
		{"not found", fmt.Errorf("f: %w", fs.ErrNotExist), http.StatusNotFound, ""},
		{"exists", fmt.Errorf("f: %w", fs.ErrExist), http.StatusConflict, ""},
		{"other", errors.New("boom"), http.StatusInternalServerError, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			writeError(w, c.err)
			if w.Code != c.code || w.Header().Get("Retry-After") != c.retryAfter {
				t.Errorf("status %d, Retry-After %q; want %d, %q", w.Code, w.Header().Get("Retry-After"), c.code, c.retryAfter)
			}
		})
	}
}
