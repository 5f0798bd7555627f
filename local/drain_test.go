package local

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// stopRecorder is a runner that records when it was stopped, and how
// many requests its replica still held then.
type stopRecorder struct {
	inFlight *atomic.Int64
	heldAt   atomic.Int64 // requests in flight at Stop; -1 before it
}

func (s *stopRecorder) Start() error { return nil }
func (s *stopRecorder) URL() string  { return "" }
func (s *stopRecorder) Ready() bool  { return true }
func (s *stopRecorder) Stop(context.Context) error {
	s.heldAt.Store(s.inFlight.Load())
	return nil
}

// A replica out of routing is stopped only once the requests it was sent
// are done, unless the provider is shutting down: a make-before-break
// move whose old replica is stopped with a request in flight answers 502
// (TestConsolidationMoveLosesNoRequest saw it on a loaded machine).
func TestStopWaitsForRequestsInFlight(t *testing.T) {
	for _, tt := range []struct {
		name     string
		shutdown bool
		wantHeld int64
	}{
		{"a request in flight finishes first", false, 0},
		{"shutting down cuts it", true, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var inFlight atomic.Int64
			inFlight.Store(1)
			run := &stopRecorder{inFlight: &inFlight}
			run.heldAt.Store(-1)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.shutdown {
				cancel()
			}
			done := make(chan struct{})
			go func() {
				stopAll(ctx, []stopJob{{run: run, inFlight: &inFlight}})
				close(done)
			}()
			if !tt.shutdown {
				time.Sleep(50 * time.Millisecond)
				if run.heldAt.Load() != -1 {
					t.Fatalf("stopped with the request still in flight")
				}
				inFlight.Add(-1)
			}
			<-done
			if got := run.heldAt.Load(); got != tt.wantHeld {
				t.Fatalf("stopped holding %d requests, want %d", got, tt.wantHeld)
			}
		})
	}
}
