package k8s

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The chart installs into the real API server (every object passes its
// validation), and its RBAC is all the provider needs: faas-gpu, run as the
// chart's ServiceAccount with the chart's arguments, deploys, scales and
// removes a function. (kwok runs no containers, so the chart's own pods are
// only scheduled and marked Running; the provider runs here instead.)
func TestHelmChartInstallsAndItsRBACSuffices(t *testing.T) {
	if env.helmErr != nil {
		t.Fatalf("helm could not be built: %v", env.helmErr)
	}
	requireNodes(t)
	const release, relNS, chartFnNS = "faas-gpu", "helm-test", "helm-fn"
	helm := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(env.helm, append(args, "--kubeconfig", env.cluster.kubeconfig)...)
		cmd.Dir = env.root
		tmp := t.TempDir()
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(tmp, "cache"), "HELM_CONFIG_HOME="+filepath.Join(tmp, "config"), "HELM_DATA_HOME="+filepath.Join(tmp, "data"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
		return out.String()
	}
	start := time.Now()
	helm("install", release, "chart/faas-gpu", "-n", relNS, "--create-namespace",
		"--set", "openfaas.functionNamespace="+chartFnNS, "--set", "basicAuth.password=s3cret", "--set", "mps.enabled=true", "--set", "provider.parkedPods=true", "--wait", "--timeout", "90s")
	t.Logf("helm install --wait: %v", time.Since(start).Round(time.Millisecond))
	defer func() {
		helm("uninstall", release, "-n", relNS, "--wait", "--timeout", "60s")
		// The chart keeps the function namespace on uninstall, by design.
		_ = env.client.CoreV1().Namespaces().Delete(context.Background(), chartFnNS, metav1.DeleteOptions{})
		_ = env.client.CoreV1().Namespaces().Delete(context.Background(), relNS, metav1.DeleteOptions{})
	}()

	ctx := context.Background()
	dep, err := env.client.AppsV1().Deployments(relNS).Get(ctx, release, metav1.GetOptions{})
	if err != nil || dep.Status.ReadyReplicas != 1 {
		t.Fatalf("provider Deployment: %v %v", dep.Status, err)
	}
	for _, ds := range []string{release + "-agent", release + "-mps"} {
		d, err := env.client.AppsV1().DaemonSets(relNS).Get(ctx, ds, metav1.GetOptions{})
		if err != nil || d.Status.DesiredNumberScheduled != int32(len(gpuNodes)) {
			t.Errorf("DaemonSet %s: %+v %v; want it on both GPU nodes", ds, d.Status, err)
		}
	}

	// The provider as the chart runs it: the chart's ServiceAccount, its
	// namespace, its function namespace.
	args := dep.Spec.Template.Spec.Containers[0].Args
	var extra []string
	for _, a := range args {
		if strings.HasPrefix(a, "-mps-pipe-dir=") || strings.HasPrefix(a, "-k8s-") {
			extra = append(extra, a)
		}
	}
	sa := dep.Spec.Template.Spec.ServiceAccountName
	tok, err := env.client.CoreV1().ServiceAccounts(relNS).CreateToken(ctx, sa, tokenRequest(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := writeKubeconfig(t, tok.Status.Token)
	extra = append(extra, "-k8s-namespace", relNS)
	p := startProviderAs(t, "chart-rbac", kc, []string{"function_namespace=" + chartFnNS}, extra...)
	p.leads2(t, relNS, "faas-gpu", 15*time.Second)

	f := fn("charted", 30, "2Gi")
	f.Namespace = chartFnNS
	(*f.Annotations)["com.openfaas.gpu.parked"] = "1" // its pod is parked (created), then removed
	p.deploy(t, f)
	p.must(t, http.StatusAccepted, http.MethodPost, "/system/scale-function/charted?namespace="+chartFnNS, map[string]any{"serviceName": "charted", "replicas": 2})
	if err := poll(30*time.Second, func() bool {
		st := p.must(t, http.StatusOK, http.MethodGet, "/system/function/charted?namespace="+chartFnNS, nil)
		return strings.Contains(string(st), `"availableReplicas":2`)
	}); err != nil {
		t.Fatalf("charted not ready under the chart's RBAC:\n%s", tail(p.out.String(), 4000))
	}
	if err := poll(20*time.Second, func() bool {
		pods, err := env.client.CoreV1().Pods(chartFnNS).List(ctx, metav1.ListOptions{LabelSelector: "gpu.faas-gpu.dev/parked=charted"})
		return err == nil && len(pods.Items) > 0
	}); err != nil {
		t.Errorf("no parked pod of charted under the chart's RBAC:\n%s", tail(p.out.String(), 4000))
	}
	// Scaled down, a replica is kept warm: its pod is labelled out of
	// routing.
	p.must(t, http.StatusAccepted, http.MethodPost, "/system/scale-function/charted?namespace="+chartFnNS, map[string]any{"serviceName": "charted", "replicas": 1})
	if err := poll(30*time.Second, func() bool {
		pods, err := env.client.CoreV1().Pods(chartFnNS).List(ctx, metav1.ListOptions{LabelSelector: labelWarm + "=true"})
		return err == nil && len(pods.Items) == 1
	}); err != nil {
		t.Errorf("no warm pod of charted under the chart's RBAC:\n%s", tail(p.out.String(), 4000))
	}
	p.must(t, http.StatusAccepted, http.MethodDelete, "/system/functions?namespace="+chartFnNS, map[string]any{"functionName": "charted"})
	if err := poll(30*time.Second, func() bool {
		deps, err := env.client.AppsV1().Deployments(chartFnNS).List(ctx, metav1.ListOptions{LabelSelector: "faas_function"})
		parked, perr := env.client.CoreV1().Pods(chartFnNS).List(ctx, metav1.ListOptions{LabelSelector: "gpu.faas-gpu.dev/parked"})
		return err == nil && perr == nil && len(deps.Items) == 0 && len(parked.Items) == 0
	}); err != nil {
		t.Errorf("charted's Deployments or parked pods not removed")
	}
	p.stop(t, syscall.SIGTERM) // before the uninstall takes its rights away
	if strings.Contains(p.out.String(), "forbidden") {
		t.Errorf("the chart's RBAC refused the provider something:\n%s", tail(p.out.String(), 4000))
	}
	if strings.Contains(p.out.String(), "cannot watch ReplicaSets") {
		t.Logf("note: the chart's Role lacks apps/replicasets get, list, watch (docs/kubernetes.md); the provider runs degraded")
	}
}
