package lifecycle

import (
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
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
