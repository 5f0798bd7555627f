package profiler

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// Options says what to measure and how.
type Options struct {
	// Function is the deployed function to profile.
	Function string
	// Namespace is the function's namespace; "" is the provider's default.
	Namespace string
	// SMs are the SM percentages to measure, each 1-100.
	SMs []int
	// Batches are the batch sizes to measure (nil: 1). Each is deployed
	// with FAAS_GPU_BATCH set to it; requests still carry one input each.
	Batches []int
	// Duration is how long each phase records.
	Duration time.Duration
	// Warmup runs before the first phase of each copy, not recorded.
	Warmup time.Duration
	// Concurrency is how many requests the load phase keeps in flight.
	Concurrency int
	// Model names the profile; "" is the function's model annotation, else
	// its name.
	Model string
	// GPU is the GPU product to write; "" reads it from /system/gpus.
	GPU string
	// Body and ContentType make each request.
	Body        []byte
	ContentType string
	// ReadyTimeout bounds the wait for a copy to be ready, and to be gone
	// once deleted (0: 2 minutes).
	ReadyTimeout time.Duration
	// Progress receives progress lines (nil: none), one every
	// ProgressEvery (0: 1 s) while a phase runs.
	Progress      io.Writer
	ProgressEvery time.Duration
	// Poll is how often readiness and removal are checked (0: 250 ms).
	Poll time.Duration
}

// Check reports what is wrong with o. Errors start with the field's name
// as `faas-gpu profile` spells its flag (sm, batch, duration, ...).
func (o Options) Check() error {
	_, err := o.withDefaults()
	return err
}

// withDefaults checks o and fills in what was left zero.
func (o Options) withDefaults() (Options, error) {
	if o.Function == "" {
		return o, fmt.Errorf("function: a function name is needed")
	}
	if len(o.SMs) == 0 {
		return o, fmt.Errorf("sm: at least one SM percentage is needed")
	}
	if err := checkInts("sm", o.SMs, 1, 100); err != nil {
		return o, err
	}
	if len(o.Batches) == 0 {
		o.Batches = []int{1}
	}
	if err := checkInts("batch", o.Batches, 1, 1024); err != nil {
		return o, err
	}
	switch {
	case o.Duration <= 0:
		return o, fmt.Errorf("duration: %s must be positive", o.Duration)
	case o.Warmup < 0:
		return o, fmt.Errorf("warmup: %s must not be negative", o.Warmup)
	case o.Concurrency < 1:
		return o, fmt.Errorf("concurrency: %d must be at least 1", o.Concurrency)
	case o.ReadyTimeout < 0:
		return o, fmt.Errorf("ready-timeout: %s must not be negative", o.ReadyTimeout)
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	o.SMs, o.Batches = slices.Sorted(slices.Values(o.SMs)), slices.Sorted(slices.Values(o.Batches))
	return o, nil
}

func checkInts(field string, vs []int, lo, hi int) error {
	seen := map[int]bool{}
	for _, v := range vs {
		if v < lo || v > hi {
			return fmt.Errorf("%s: %d is outside %d-%d", field, v, lo, hi)
		}
		if seen[v] {
			return fmt.Errorf("%s: %d is given twice", field, v)
		}
		seen[v] = true
	}
	return nil
}

// phases is how many recorded phases a copy of batch gets: the latency
// phase, and the load phase when it keeps more requests in flight.
func (o Options) phases(batch int) int {
	if o.Concurrency > batch {
		return 2
	}
	return 1
}

// estimate is how long measuring takes, deployments aside.
func (o Options) estimate() time.Duration {
	var d time.Duration
	for _, b := range o.Batches {
		d += time.Duration(len(o.SMs)) * (o.Warmup + time.Duration(o.phases(b))*o.Duration)
	}
	return d
}
