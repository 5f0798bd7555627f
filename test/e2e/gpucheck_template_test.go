package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// TestGPUCheckTemplateDryRun runs hack/gpu-check.sh's template step
// (GPU_CHECK_ONLY=template) on CPU: the same script a lent GPU machine
// runs, with the classifier from the template profiled at two shares and
// two batches. It must write a profile with every point, batch 8 slower
// than batch 1 at each share, and time the step against its plan; on a GPU
// the same run measures the slices.
func TestGPUCheckTemplateDryRun(t *testing.T) {
	pyDir := torchPython(t)
	if _, err := exec.LookPath("curl"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("curl is needed for hack/gpu-check.sh")
		}
		t.Skip("no curl")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(repoRoot, "hack", "gpu-check.sh"))
	cmd.Env = append(withoutEnv(os.Environ(), "PATH"), "PATH="+pyDir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"GPU_CHECK_DRY_RUN=1", "GPU_CHECK_ONLY=template", "FAAS_GPU_BIN="+providerBin.get(t),
		"TEMPLATE_MODEL=mobilenet_v3_small", "TEMPLATE_SHARES=50 100", "TEMPLATE_DURATION=1",
		"PROFILE_OUT="+out, "TMPDIR="+t.TempDir())
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gpu-check.sh template dry run: %v\n%s", err, truncate(string(b), 16000))
	}
	if !strings.Contains(string(b), "== MPS: off") {
		t.Errorf("the run must say whether MPS runs; got:\n%s", truncate(string(b), 8000))
	}
	// The step a lent machine runs first must fit the default budget and
	// report its time against the plan's estimate.
	if !regexp.MustCompile(`(?m)^  8 the pytorch-gpu template's profile: \d+ s \(estimate \d+ s\)$`).Match(b) {
		t.Errorf("the time table must show step 8 run against its estimate; got:\n%s", truncate(string(b), 8000))
	}
	data, err := os.ReadFile(filepath.Join(out, "template-mobilenet_v3_small.yaml"))
	if err != nil {
		t.Fatalf("no profile copied out: %v\n%s", err, truncate(string(b), 8000))
	}
	prof, err := profiles.Parse(data)
	if err != nil {
		t.Fatalf("the profile does not parse: %v\n%s", err, data)
	}
	lat := map[string]float64{}
	for _, pt := range prof.Points {
		lat[fmt.Sprint(pt.SM, "/", pt.Batch)] = pt.Latency
	}
	for _, sm := range []int{50, 100} {
		b1, ok1 := lat[fmt.Sprint(sm, "/1")]
		b8, ok8 := lat[fmt.Sprint(sm, "/8")]
		if !ok1 || !ok8 || !(b8 > b1) {
			t.Errorf("sm %d%%: want batch 1 and 8 measured, batch 8 slower; got %s", sm, data)
		}
	}
}
