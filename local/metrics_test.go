package local_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
)

// TestQuarantinedRecordsAreExported: the provider's /metrics collector
// tells how many state records local mode set aside at start-up.
func TestQuarantinedRecordsAreExported(t *testing.T) {
	tests := []struct {
		name    string
		corrupt []string // function records, relative to functions/
		want    float64
	}{
		{name: "clean state dir", want: 0},
		{name: "two corrupt records", corrupt: []string{"openfaas-fn/a.json", "openfaas-fn/b.json"}, want: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.corrupt {
				p := filepath.Join(dir, "functions", f)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("not json"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			b, err := local.New(local.Config{StateDir: dir, Inventory: gpu.BuiltinInventory("node-a"),
				Emulation: local.Emulation{Latency: time.Millisecond}, Log: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close(context.Background())
			reg := prometheus.NewRegistry()
			reg.MustRegister(handlers.NewCollector(b))
			families, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range families {
				if f.GetName() == "faas_gpu_state_records_quarantined_total" {
					if got := f.GetMetric()[0].GetCounter().GetValue(); got != tc.want {
						t.Errorf("faas_gpu_state_records_quarantined_total = %v, want %v", got, tc.want)
					}
					return
				}
			}
			t.Error("no faas_gpu_state_records_quarantined_total")
		})
	}
}
