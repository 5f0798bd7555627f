package k8s

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/internal/testutil"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/profiles/profiler"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// copyRunner stands in for the kubelet for the temporary copies that
// `faas-gpu profile` deploys: kwok marks their pods Running with a
// loopback IP but runs nothing, so for each such pod it starts smfn
// (local/testdata/smfn, slower the fewer SMs it is given) on the pod's IP
// and the function port, with the environment the provider rendered into
// the pod's container. The profile therefore comes out ordered only if the
// Kubernetes backend gave each copy its own CUDA_MPS_ACTIVE_THREAD_PERCENTAGE.
type copyRunner struct {
	bin  string
	port int
	out  *testutil.Buffer

	mu    sync.Mutex
	procs map[string]*exec.Cmd         // by pod name
	envs  map[string]map[string]string // the env each pod's process got, by function
}

// runCopies starts a copyRunner for the copies of function until the test
// ends.
func runCopies(t *testing.T, function, bin string, port int) *copyRunner {
	t.Helper()
	r := &copyRunner{bin: bin, port: port, out: &testutil.Buffer{}, procs: map[string]*exec.Cmd{}, envs: map[string]map[string]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(env.client, 0, informers.WithNamespace(fnNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = profiler.LabelCopyOf + "=" + function }))
	inf := f.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.sync(t, obj) },
		UpdateFunc: func(_, obj any) { r.sync(t, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				r.stop(p.Name)
			}
		},
	}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() {
		close(stop)
		f.Shutdown()
		r.mu.Lock()
		names := make([]string, 0, len(r.procs))
		for n := range r.procs {
			names = append(names, n)
		}
		r.mu.Unlock()
		for _, n := range names {
			r.stop(n)
		}
		if t.Failed() {
			t.Logf("---- output of the copies' smfn processes ----\n%s", r.out.Tail(8<<10))
		}
	})
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		t.Fatal("pod informer did not sync")
	}
	return r
}

// sync starts the pod's process once it is Running with an IP, and stops
// it once the pod is terminating.
func (r *copyRunner) sync(t *testing.T, obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if p.DeletionTimestamp != nil {
		r.stop(p.Name)
		return
	}
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || len(p.Spec.Containers) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.procs[p.Name] != nil {
		return
	}
	got := map[string]string{}
	cmd := exec.Command(r.bin)
	for _, e := range p.Spec.Containers[0].Env {
		got[e.Name] = e.Value
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, "port="+strconv.Itoa(r.port), "SMFN_ADDR="+p.Status.PodIP)
	cmd.Stdout, cmd.Stderr = r.out, r.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Errorf("start smfn for pod %s: %v", p.Name, err)
		return
	}
	r.procs[p.Name] = cmd
	r.envs[p.Labels["faas_function"]] = got
}

func (r *copyRunner) stop(pod string) {
	r.mu.Lock()
	cmd := r.procs[pod]
	delete(r.procs, pod)
	r.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// env is the environment the copy's pod was started with.
func (r *copyRunner) env(function string) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.envs[function]
}

// running is how many copy processes run now.
func (r *copyRunner) running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.procs)
}

// profileRun is a `faas-gpu profile` process.
type profileRun struct {
	cmd            *exec.Cmd
	stdout, stderr *testutil.Buffer
	done           chan error
}

func startProfile(t *testing.T, args ...string) *profileRun {
	t.Helper()
	r := &profileRun{stdout: &testutil.Buffer{}, stderr: &testutil.Buffer{}, done: make(chan error, 1)}
	r.cmd = exec.Command(env.providerBin, append([]string{"profile"}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.stdout, r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	return r
}

func (r *profileRun) wait(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case err := <-r.done:
		return err
	case <-time.After(within):
		_ = r.cmd.Process.Kill()
		t.Fatalf("faas-gpu profile still running after %v:\n%s", within, r.stderr.Tail(4000))
		return nil
	}
}

// copiesLeft lists what of the copies of function is left in the cluster.
func copiesLeft(t *testing.T, function string) []string {
	t.Helper()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: profiler.LabelCopyOf + "=" + function}
	var left []string
	deps, err := env.client.AppsV1().Deployments(fnNS).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		left = append(left, "deployment "+d.Name)
	}
	pods, err := env.client.CoreV1().Pods(fnNS).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		left = append(left, "pod "+p.Name)
	}
	return left
}

// TestProfileOnKubernetes profiles smfn through the Kubernetes backend:
// each slice's copy is a real Deployment whose pod gets the slice's MPS
// environment, the measured profile is ordered as smfn behaves, Ctrl-C
// leaves nothing behind, and a provider started with -profiles decides
// from the result.
func TestProfileOnKubernetes(t *testing.T) {
	requireNodes(t)
	smfn := filepath.Join(t.TempDir(), "smfn")
	if b, err := goBuild(env.root, "-o", smfn, "./local/testdata/smfn"); err != nil {
		t.Fatalf("build smfn: %v\n%s", err, b)
	}
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProvider(t, "profile", "-k8s-function-port", strconv.Itoa(port))
	p.leads(t, 10*time.Second)
	defer func() { cleanUp(t, p) }()
	copies := runCopies(t, "smfn", smfn, port)

	p.deploy(t, types.FunctionDeployment{
		Service:     "smfn",
		Image:       "ghcr.io/example/smfn:1",
		EnvVars:     map[string]string{"mode": "http", "SMFN_WORK_MS": "3"},
		Annotations: &map[string]string{"com.openfaas.gpu.sm": "10", "com.openfaas.gpu.memory": "1Gi"},
	})
	p.ready(t, "smfn", 1, 30*time.Second)
	dir := t.TempDir()
	out := filepath.Join(dir, "smfn.yaml")
	sms := []int{10, 25, 50, 100}

	t.Run("measures each slice's copy", func(t *testing.T) {
		run := startProfile(t, "--gateway", p.url, "--function", "smfn", "--namespace", fnNS, "--sm", "10,25,50,100",
			"--duration", "1s", "--warmup", "300ms", "--concurrency", "4", "--progress-interval", "500ms", "--out", out)
		err := run.wait(t, 3*time.Minute)
		t.Logf("faas-gpu profile:\n%s%s", run.stderr, run.stdout)
		if err != nil {
			t.Fatalf("faas-gpu profile: %v", err)
		}
		testutil.ReadSMFNProfile(t, out, v100, sms)
		// What the Kubernetes backend gave each copy's pod.
		for _, sm := range sms {
			name := fmt.Sprintf("smfn-profile-%d", sm)
			e := copies.env(name)
			if e == nil {
				t.Errorf("no pod of %s ran", name)
				continue
			}
			if e["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] != strconv.Itoa(sm) || e["FAAS_GPU_BATCH"] != "1" ||
				e["SMFN_WORK_MS"] != "3" || e["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "" {
				t.Errorf("pod of %s started with %v, want its slice's MPS environment and the function's own", name, e)
			}
		}
		if left := copiesLeft(t, "smfn"); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
		if fns := p.gpus(t).Functions; len(fns) != 1 || fns[0].Name != "smfn" {
			t.Errorf("functions after profiling: %+v, want only smfn", fns)
		}
	})

	t.Run("Ctrl-C removes the copy", func(t *testing.T) {
		run := startProfile(t, "--gateway", p.url, "--function", "smfn", "--namespace", fnNS, "--sm", "10,100",
			"--duration", "60s", "--warmup", "0s", "--progress-interval", "100ms", "--out", filepath.Join(t.TempDir(), "x.yaml"))
		if err := poll(60*time.Second, func() bool { return strings.Contains(run.stderr.String(), "sm 10% (1 in flight): ") }); err != nil {
			_ = run.cmd.Process.Kill()
			t.Fatalf("no measurement started:\n%s", run.stderr)
		}
		if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		err := run.wait(t, time.Minute)
		if err == nil || !strings.Contains(run.stderr.String(), "interrupted: removing temporary functions") ||
			!strings.Contains(run.stderr.String(), "removed smfn-profile-10") {
			t.Fatalf("after SIGINT: %v\n%s", err, run.stderr)
		}
		if err := poll(30*time.Second, func() bool { return len(copiesLeft(t, "smfn")) == 0 && copies.running() == 0 }); err != nil {
			t.Errorf("left behind after Ctrl-C: %v", copiesLeft(t, "smfn"))
		}
	})

	// A provider restarted with -profiles decides from the result. Not a
	// subtest: the restarted provider must outlive it for cleanUp.
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal("no profile: the measuring subtest failed")
	}
	prof, err := profiles.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	want, err := scheduler.Choose(&prof, 0, scheduler.ChooseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.stop(t, syscall.SIGTERM)
	p = startProvider(t, "profile-2", "-k8s-function-port", strconv.Itoa(port), "-profiles", dir)
	p.leads(t, 15*time.Second)
	p.deploy(t, types.FunctionDeployment{
		Service:     "consumer",
		Image:       "ghcr.io/example/consumer:1",
		Annotations: &map[string]string{"com.openfaas.gpu.model": "smfn"},
	})
	var got string
	_ = poll(10*time.Second, func() bool {
		for _, f := range p.gpus(t).Functions {
			if f.Name == "consumer" {
				got = f.Decision
			}
		}
		return got != ""
	})
	if got != want.Explanation || !strings.HasPrefix(got, "smfn on "+v100+": sm ") {
		t.Fatalf("consumer's decision %q, want the measured profile's choice %q", got, want.Explanation)
	}
}
