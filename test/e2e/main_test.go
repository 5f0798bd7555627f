package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// artifact is something TestMain builds in the background; tests wait for
// the ones they need.
type artifact struct {
	name string
	done chan struct{}
	path string
	err  error
	took time.Duration
}

func newArtifact(name string) *artifact { return &artifact{name: name, done: make(chan struct{})} }

// get waits for the build and fails the test if it failed.
func (a *artifact) get(t *testing.T) string {
	t.Helper()
	requireGo(t)
	<-a.done
	if a.err != nil {
		t.Fatalf("building %s failed: %v", a.name, a.err)
	}
	return a.path
}

var (
	// noGo says why nothing can be built; tests skip with it.
	noGo string

	repoRoot string

	providerBin = newArtifact("faas-gpu")
	httpfnBin   = newArtifact("local/testdata/httpfn")
	gatewayBin  = newArtifact("the OpenFaaS gateway (hack/build-gateway.sh)")
	// gatewayDir is the gateway module's folder: its working directory, so
	// that ./assets (the UI) resolves. Valid once gatewayBin is done.
	gatewayDir string
)

func requireGo(t *testing.T) {
	t.Helper()
	if noGo != "" {
		t.Skip(noGo)
	}
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	if _, err := exec.LookPath("go"); err != nil {
		noGo = "the go command is not on PATH: the end-to-end tests build faas-gpu, the test function and the gateway with it"
		return m.Run()
	}
	root, err := findRepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	repoRoot = root
	dir, err := os.MkdirTemp("", "faas-gpu-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)

	// The three builds run at once; each test waits only for what it uses.
	go build(providerBin, func() (string, error) {
		out := filepath.Join(dir, "faas-gpu")
		return out, goBuild(out, "github.com/faas-gpu/faas-gpu")
	})
	go build(httpfnBin, func() (string, error) {
		out := filepath.Join(dir, "httpfn")
		return out, goBuild(out, "./local/testdata/httpfn")
	})
	go build(gatewayBin, func() (string, error) {
		out := filepath.Join(dir, "gateway", "gateway")
		cmd := exec.Command("bash", filepath.Join(root, "hack", "build-gateway.sh"), out)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%v\n%s", err, b)
		}
		assets, err := os.ReadFile(out + ".assets")
		if err != nil {
			return "", fmt.Errorf("hack/build-gateway.sh wrote no %s.assets: %w", out, err)
		}
		a := strings.TrimSpace(string(assets))
		if st, err := os.Stat(a); err != nil || !st.IsDir() {
			return "", fmt.Errorf("the gateway's assets folder %q from %s.assets is not a folder", a, out)
		}
		gatewayDir = filepath.Dir(a)
		return out, nil
	})

	code := m.Run()
	// Builds still running write into dir; let them finish before it goes.
	for _, a := range []*artifact{providerBin, httpfnBin, gatewayBin} {
		<-a.done
	}
	return code
}

func build(a *artifact, f func() (string, error)) {
	start := time.Now()
	a.path, a.err = f()
	a.took = time.Since(start)
	close(a.done)
}

func goBuild(out, pkg string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	cmd.Dir = repoRoot
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build -o %s %s: %v\n%s", out, pkg, err, buf.String())
	}
	return nil
}

// findRepoRoot is two levels up from this package, checked by its go.mod.
func findRepoRoot() (string, error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return "", err
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("the repository root %s has no go.mod: %w", root, err)
	}
	if !strings.Contains(string(mod), "module github.com/faas-gpu/faas-gpu") {
		return "", fmt.Errorf("%s/go.mod is not the github.com/faas-gpu/faas-gpu module", root)
	}
	return root, nil
}
