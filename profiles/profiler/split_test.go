package profiler

import (
	"context"
	"strings"
	"testing"
	"time"
)

// The profiler records what the host/GPU split needs: the fit of every
// batch measured at enough SM shares, and a warning when too few are
// measured for one.
func TestRunRecordsTheSplit(t *testing.T) {
	tests := []struct {
		name       string
		sms        []int
		wantSplits int
		wantOut    string
	}{
		{"three shares", []int{25, 50, 100}, 1, "batch 1: host"},
		{"two shares", []int{50, 100}, 0, "needs at least 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeProvider(t)
			f.work = 2 * time.Millisecond
			deployOriginal(f, "fn")
			var out syncBuffer
			o := quick("fn", tt.sms...)
			o.Progress = &out
			res, err := Run(context.Background(), f.client(t), o)
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, out.String())
			}
			if len(res.Splits) != tt.wantSplits {
				t.Fatalf("%d splits, want %d", len(res.Splits), tt.wantSplits)
			}
			if !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("progress does not say %q:\n%s", tt.wantOut, out.String())
			}
			for _, s := range res.Splits {
				// The fake's work shrinks with SMs: some of it is GPU work.
				if s.GPUMs <= 0 || s.Points != len(tt.sms) {
					t.Errorf("split %+v: want a GPU part over %d points", s, len(tt.sms))
				}
			}
		})
	}
}
