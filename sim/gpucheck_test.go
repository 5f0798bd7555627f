package sim

import (
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// hack/gpu-check.sh's co-location experiment, dry run (a CPU stand-in for
// the GPU work, two client counts, short phases): it must write a
// contention table this package reads, with a penalty for each model,
// and one colocation.csv row per client of every configuration. On a GPU
// the same script replaces the built-in penalties with measured ones.
func TestGPUCheckColocationDryRun(t *testing.T) {
	for _, tool := range []string{"bash", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is needed for hack/gpu-check.sh's dry run", tool)
			}
			t.Skipf("no %s", tool)
		}
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join("..", "hack", "gpu-check.sh"))
	cmd.Env = append(os.Environ(), "GPU_CHECK_DRY_RUN=1", "GPU_CHECK_ONLY=colocate", "COLOC_CLIENTS=1 2",
		"COLOC_PHASE=0.05", "COLOC_MODELS=resnet50 mobilenet_v2", "COLOC_OUT="+out, "TMPDIR="+t.TempDir())
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpu-check.sh dry run: %v\n%s", err, b)
	}
	c, err := LoadContention(filepath.Join(out, "contention.csv"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"resnet50", "mobilenet_v2"} {
		if _, ok := c.Penalties[m]; !ok {
			t.Errorf("contention.csv has no penalty for %s: %v", m, c.Penalties)
		}
	}
	f, err := os.Open(filepath.Join(out, "colocation.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// Per batch: 1 client; 2 of one model; 2 of two models; 2 uneven.
	if want := 1 + 2*(1+2+2+2); len(rows) != want {
		t.Errorf("colocation.csv: %d lines, want %d (header and 7 clients at each of 2 batches)", len(rows), want)
	}
}
