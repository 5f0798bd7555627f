// Package local is the embedded backend: it runs replicas on this machine as
// local processes or emulated GPU workers, with no cluster.
package local

import (
	"context"
	"time"
)

// ReplicaSpec is everything needed to run one replica.
type ReplicaSpec struct {
	ID        string // instance name, shown in logs and /system/gpus
	Function  string
	Namespace string
	// Process is the function's fprocess; empty means an emulated worker.
	Process string
	// HTTPMode is of-watchdog's mode=http: Process is a long-running server
	// given a port to listen on. Otherwise each request runs Process once,
	// body on stdin, response from stdout (the classic watchdog).
	HTTPMode bool
	// Env is KEY=VALUE: the function's env vars, the placement
	// (NVIDIA_VISIBLE_DEVICES, CUDA_MPS_*) and secret_mount_path.
	Env []string
	// WorkDir is a directory owned by this replica (it exists); processes
	// run in it.
	WorkDir   string
	Emulation Emulation
	// Fill, for an emulated replica with Serve, is what a load in its idle
	// time costs (POST /_/models): the load's time, then the fill that
	// records the model, answering the models held after it, or false
	// where it no longer fits without evicting. nil: it takes no loads.
	Fill func(model string) (time.Duration, func() ([]string, bool))
	// Parked starts its process ahead of a placement (lifecycle/parked.go):
	// with no GPU settings, FAAS_GPU_PARKED=1 in Env, and ready while it
	// waits for them on /_/gpu (docs/replica-protocol.md). An HTTP-mode
	// process only, on its own or behind the watchdog.
	Parked bool
	// Watchdog, when set, runs the replica behind the provider's own
	// of-watchdog: a template's build folder, or a function whose env has
	// watchdog settings.
	Watchdog *Watchdog
}

// Emulation is how an emulated replica behaves.
type Emulation struct {
	Latency  time.Duration // per request, at the replica's slice
	LoadTime time.Duration // model load, paid by the first request
	Model    string
	// Slots is how many requests the slice serves at once, its batch size
	// (0 means 1): a GPU slice runs one batch at a time, so requests beyond
	// it queue, as they would on the device.
	Slots int
	// Serve, when set, decides per request, for the model the request names
	// (X-Model, else Model), its latency and the load it pays; the backend
	// answers from the profiles and the model cache. Unset, the replica uses
	// Latency and pays LoadTime once.
	Serve func(model string) Service
}

// Service is what serving one request of a model costs an emulated replica.
type Service struct {
	Latency time.Duration
	Load    time.Duration // 0 when the model is in the replica's memory
	// Outcome is the cache outcome: hit, node-hit or miss.
	Outcome string
	// Resident are the models in the replica's memory once this one is
	// loaded, most recently used first: what it reports holding.
	Resident []string
}

// LogSink receives one line of a replica's output.
type LogSink func(instance, text string)

// runner runs one replica and serves it on a loopback URL.
type runner interface {
	// Start launches the replica and returns without waiting for it to be
	// ready.
	Start() error
	// URL is the replica's base URL (http://127.0.0.1:PORT), set by Start.
	URL() string
	// Ready is true while the replica answers requests.
	Ready() bool
	// Stop ends the replica and waits for it to exit.
	Stop(ctx context.Context) error
}
