package sim

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Regression: with no measured request (a -warmup past the load) the
// latency plot's log axis had no range and gonum panicked, so the command
// died with exit 2 and no plots.
func TestWritePlotsWithoutMeasuredRequests(t *testing.T) {
	tests := []struct {
		name    string
		results []*Result
	}{
		{"no latencies", []*Result{{Policy: "lb", Series: []Sample{{At: time.Second, GPUsUsed: 1}}}, {Policy: "faas-gpu"}}},
		{"no series either", []*Result{{Policy: "lb"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if AnyMeasured(tt.results) {
				t.Fatal("the results measured a request")
			}
			if err := WritePlots(dir, "r", tt.results); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{"r-latency-cdf.svg", "r-gpus.svg", "r-sm.svg", "r-throughput.svg"} {
				if info, err := os.Stat(filepath.Join(dir, f)); err != nil || info.Size() == 0 {
					t.Errorf("%s: %v", f, err)
				}
			}
		})
	}
}
