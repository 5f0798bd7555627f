// Package k8s tests faas-gpu's Kubernetes backend against a real control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
// with kwok's fake GPU nodes, through the real faas-gpu binary's HTTP API.
//
// The binaries come from hack/k8s-testenv.sh (cached outside the checkout;
// about 9 minutes cold on 2 cores, seconds warm). If they cannot be built
// the tests fail with the build's output: they never skip silently.
package k8s

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// env is what TestMain sets up for every test.
var env struct {
	root        string
	cluster     *cluster
	client      kubernetes.Interface
	providerBin string
	// race: the provider binary has the race detector built in.
	race bool
	// helm is built by hack/build-helm.sh; helmErr says why not.
	helm    string
	helmErr error
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	start := time.Now()
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "test/k8s: "+format+"\n", args...)
		return 1
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return fail("%v", err)
	}
	if mod, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !bytes.Contains(mod, []byte("module github.com/faas-gpu/faas-gpu")) {
		return fail("%s is not the faas-gpu repository root", root)
	}
	env.root = root
	dir, err := os.MkdirTemp("", "faas-gpu-k8s-")
	if err != nil {
		return fail("%v", err)
	}

	// The control plane's binaries and the provider build at once.
	type result struct {
		out string
		err error
	}
	binc, provc, helmc := make(chan result, 1), make(chan result, 1), make(chan result, 1)
	go func() {
		cmd := exec.Command("bash", filepath.Join(root, "hack", "build-helm.sh"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			helmc <- result{err: fmt.Errorf("hack/build-helm.sh: %v\n%s", err, stderr.String())}
			return
		}
		helmc <- result{out: strings.TrimSpace(stdout.String())}
	}()
	go func() {
		cmd := exec.Command("bash", filepath.Join(root, "hack", "k8s-testenv.sh"))
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if err != nil {
			binc <- result{err: fmt.Errorf("hack/k8s-testenv.sh failed: %v\n%s%s", err, stdout.String(), stderr.String())}
			return
		}
		binc <- result{out: lines[len(lines)-1]}
	}()
	go func() {
		out := filepath.Join(dir, "faas-gpu")
		// With the race detector when it builds here, so races in the
		// backend fail these tests too.
		if b, err := goBuild(root, "-race", "-o", out, "."); err == nil {
			env.race = true
			provc <- result{out: out}
			return
		} else if !strings.Contains(string(b), "race") && !strings.Contains(string(b), "cgo") {
			provc <- result{err: fmt.Errorf("go build faas-gpu: %v\n%s", err, b)}
			return
		}
		if b, err := goBuild(root, "-o", out, "."); err != nil {
			provc <- result{err: fmt.Errorf("go build faas-gpu: %v\n%s", err, b)}
			return
		}
		provc <- result{out: out}
	}()
	bins, prov, hb := <-binc, <-provc, <-helmc
	env.helm, env.helmErr = hb.out, hb.err
	if bins.err != nil {
		return fail("the Kubernetes test binaries could not be built (CI installs them with hack/k8s-testenv.sh):\n%v", bins.err)
	}
	if prov.err != nil {
		return fail("%v", prov.err)
	}
	env.providerBin = prov.out
	built := time.Since(start)

	c, err := startCluster(bins.out, dir)
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		return fail("control plane: %v\n%s", err, c.describe())
	}
	env.cluster = c
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fail("%v", err)
	}
	rc.QPS, rc.Burst = 100, 200
	env.client, err = kubernetes.NewForConfig(rc)
	if err != nil {
		return fail("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := setUpCluster(ctx); err != nil {
		return fail("cluster set-up: %v\n%s", err, c.describe())
	}
	fmt.Fprintf(os.Stderr, "test/k8s: binaries and faas-gpu built in %v (race detector: %v), control plane with 2 GPU nodes up in %v\n",
		built.Round(time.Millisecond), env.race, (time.Since(start) - built).Round(time.Millisecond))

	code := m.Run()
	if code == 0 {
		c.stop()
		_ = os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "test/k8s: kept %s for inspection; %s\n", dir, c.describe())
	}
	return code
}

func goBuild(root string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = root
	return cmd.CombinedOutput()
}
