package lifecycle

import (
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// FAAS_GPU_MODEL_DIR names the node's model store where there is one; a
// function's own value does not override it (the mount is the provider's),
// and without a store the variable is not set at all, so a replica can
// tell "no store" from an empty folder.
func TestRenderEnvModelDir(t *testing.T) {
	p := scheduler.Placement{Node: "n0", GPUs: []string{"GPU-x"}, Slice: gpu.Slice{SMPercent: 50, MemoryBytes: 1 << 30}}
	cases := []struct {
		name     string
		dir      string
		own      map[string]string
		want     string
		wantSets int
	}{
		{"store", "/var/lib/faas-gpu/models", nil, "/var/lib/faas-gpu/models", 1},
		{"store wins over the function's", "/models", map[string]string{"FAAS_GPU_MODEL_DIR": "/elsewhere"}, "/models", 1},
		{"no store", "", nil, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := fn("a", 50, 1, 1, 1)
			spec.Deployment.EnvVars = tc.own
			n, got := 0, ""
			for _, e := range RenderEnv(EnvInput{Spec: spec, Placement: p, InContainer: true, ModelDir: tc.dir}) {
				if e.Name == "FAAS_GPU_MODEL_DIR" {
					n++
					got = e.Value
				}
			}
			if n != tc.wantSets || got != tc.want {
				t.Fatalf("FAAS_GPU_MODEL_DIR set %d times to %q, want %d times %q", n, got, tc.wantSets, tc.want)
			}
		})
	}
}

func TestReplicaBatch(t *testing.T) {
	cfg := scheduler.SliceConfig{SMPercent: 30, Batch: 4, Throughput: 100}
	tests := []struct {
		name string
		env  map[string]string
		want int
	}{
		{"the slice's", nil, 4},
		{"the function's own wins", map[string]string{"FAAS_GPU_BATCH": "8"}, 8},
		{"not a number: the slice's", map[string]string{"FAAS_GPU_BATCH": "many"}, 4},
		{"zero: the slice's", map[string]string{"FAAS_GPU_BATCH": "0"}, 4},
	}
	if got := ReplicaBatch(scheduler.Function{Deployment: types.FunctionDeployment{EnvVars: map[string]string{"FAAS_GPU_BATCH": "8"}}}, scheduler.SliceConfig{}); got != 0 {
		t.Errorf("no slice: ReplicaBatch = %d, want 0 (not held back)", got)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := scheduler.Function{Deployment: types.FunctionDeployment{Service: "f", EnvVars: tt.env}}
			if got := ReplicaBatch(spec, cfg); got != tt.want {
				t.Errorf("ReplicaBatch = %d, want %d", got, tt.want)
			}
		})
	}
}
