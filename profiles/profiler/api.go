package profiler

import (
	"context"
	"errors"
	"fmt"

	"github.com/openfaas/faas-provider/types"
)

// API is the part of the OpenFaaS provider API the profiler uses. Client
// implements it over HTTP; tests may fake it.
type API interface {
	// Function returns a function's status; an unknown function is an
	// error wrapping ErrNotFound.
	Function(ctx context.Context, name, namespace string) (types.FunctionStatus, error)
	// Deploy creates a function; one that exists is an error wrapping
	// ErrExists.
	Deploy(ctx context.Context, dep types.FunctionDeployment) error
	// Delete removes a function; an unknown one is an error wrapping
	// ErrNotFound.
	Delete(ctx context.Context, name, namespace string) error
	// GPUs is the provider's /system/gpus report; where it is not served
	// (an OpenFaaS gateway does not forward it) the error wraps
	// ErrNoGPUReport.
	GPUs(ctx context.Context) (GPUReport, error)
	// Invoke sends one request to a function and reads the whole answer; a
	// non-2xx answer is a *StatusError.
	Invoke(ctx context.Context, name, namespace string, body []byte, contentType string) error
}

var (
	// ErrNotFound: the function does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a function of that name already exists.
	ErrExists = errors.New("already exists")
	// ErrNoGPUReport: the URL serves no /system/gpus.
	ErrNoGPUReport = errors.New("no /system/gpus here")
	// ErrUnauthorized: the credentials were missing or wrong.
	ErrUnauthorized = errors.New("unauthorized (401): give the provider's basic-auth credentials (--username/--password, $OPENFAAS_USER/$OPENFAAS_PASSWORD or --secret-mount-path)")
)

// StatusError is an answer with an unexpected HTTP status.
type StatusError struct {
	Code int
	Body string // the start of the answer, for the message
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("HTTP %d", e.Code)
	}
	return fmt.Sprintf("HTTP %d: %s", e.Code, e.Body)
}
