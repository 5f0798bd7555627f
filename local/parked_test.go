package local

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// parkingSpec is an HTTP-mode httpfn function asking for n parked
// processes, with env added to its variables.
func parkingSpec(t *testing.T, name string, n int, env map[string]string) scheduler.Function {
	spec := asHTTPFn(t, fnSpec(name, 30, 2<<30), env)
	spec.Scale.Parked = n
	return spec
}

// parkedNow lists b's parked processes, ready or not.
func parkedNow(b *Backend) []*parkedRun {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*parkedRun
	for _, pr := range b.parked {
		out = append(out, pr)
	}
	return out
}

func parkedReady(b *Backend, fn string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	ready, _ := b.core.Parked(key(DefaultNamespace, fn))
	return ready
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// procOf is the HTTP-mode process a parked runner runs: its own, or the
// one behind its watchdog.
func procOf(t *testing.T, run parkedRunner) *processRunner {
	t.Helper()
	switch r := run.(type) {
	case *processRunner:
		return r
	case *watchdogRunner:
		r.mu.Lock()
		defer r.mu.Unlock()
		if p, ok := r.inner.(*processRunner); ok {
			return p
		}
	}
	t.Fatalf("parked runner %T runs no HTTP-mode process", run)
	return nil
}

// A function that asks for a parked process gets one, started without GPU
// settings; a replica placed later is that process, given its settings on
// the replica protocol (no second start), and the pool is refilled. A
// delete ends every process, parked or not. The same on its own and
// behind the provider's watchdog (a function with watchdog settings, as a
// template's build is).
func TestParkedProcessBecomesTheNextReplica(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
	}{
		{"own process", map[string]string{"HTTPFN_HANDOVER_MS": "50"}},
		{"behind the watchdog", map[string]string{"HTTPFN_HANDOVER_MS": "50", "exec_timeout": "30s"}},
	} {
		t.Run(tt.name, func(t *testing.T) { checkParkedBecomesReplica(t, tt.env) })
	}
}

func checkParkedBecomesReplica(t *testing.T, env map[string]string) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.Deploy(ctx, parkingSpec(t, "parky", 1, env)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a process parked and waiting", func() bool { return parkedReady(b, "parky") == 1 })
	parked := parkedNow(b)
	if len(parked) != 1 {
		t.Fatalf("%d processes parked, want 1", len(parked))
	}
	pr := parked[0]
	proc := procOf(t, pr.run)
	pid := proc.pid()
	rep, err := b.GPUReport(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Functions) != 1 || rep.Functions[0].Parked != 1 {
		t.Fatalf("/system/gpus shows %+v, want the function with 1 parked", rep.Functions)
	}
	// What it was started with: no GPU settings, and told it is parked.
	if environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil {
		vars := strings.Split(string(environ), "\x00")
		if !slices.Contains(vars, "FAAS_GPU_PARKED=1") || slices.ContainsFunc(vars, func(v string) bool { return strings.HasPrefix(v, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=") }) {
			t.Fatalf("a parked process started with %q, want FAAS_GPU_PARKED=1 and no GPU settings", vars)
		}
	}
	if got := getBody(t, pr.run.URL()+"/"); !strings.HasPrefix(got, "parked") {
		t.Fatalf("a parked process answers %q to a request, want that it is parked", got)
	}

	if err := b.Scale(ctx, DefaultNamespace, "parky", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "two replicas serving", func() bool {
		rt, err := b.Route(DefaultNamespace, "parky", "")
		return err == nil && len(rt.Endpoints) == 2
	})
	b.mu.Lock()
	var took *replica
	for _, r := range b.running {
		if h, ok := r.run.(*handedOver); ok && h.parkedRunner == pr.run {
			took = r
		}
	}
	b.mu.Unlock()
	if took == nil {
		t.Fatal("no replica took the parked process")
	}
	if proc.pid() != pid || proc.starts.Load() != 1 {
		t.Fatalf("the replica's process is pid %d after %d starts, want the parked pid %d started once", proc.pid(), proc.starts.Load(), pid)
	}
	url := took.run.URL()
	if got, want := getBody(t, url+"/env/CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), strconv.Itoa(took.config.SMPercent); got != want || want == "0" {
		t.Fatalf("the replica's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is %q, want its slice's %s", got, want)
	}
	if got := getBody(t, url+"/env/FAAS_GPU_PARKED"); got != "" {
		t.Fatalf("FAAS_GPU_PARKED=%q after the hand-over", got)
	}
	eventually(t, 10*time.Second, "the pool refilled", func() bool { return parkedReady(b, "parky") == 1 })
	refill := parkedNow(b)
	if len(refill) != 1 || refill[0] == pr {
		t.Fatalf("parked after the take: %d processes, want one new", len(refill))
	}
	pids := []int{pid, procOf(t, refill[0].run).pid()}

	if err := b.Delete(ctx, DefaultNamespace, "parky"); err != nil {
		t.Fatal(err)
	}
	if left := parkedNow(b); len(left) != 0 {
		t.Fatalf("%d processes parked after the delete", len(left))
	}
	for _, p := range pids {
		eventually(t, 10*time.Second, "process "+strconv.Itoa(p)+" gone", func() bool { return syscall.Kill(p, 0) != nil })
	}
}

// A hand-over the process refuses loses that replica, as a process that
// died would: the core places another, which starts a process of its own.
func TestRefusedHandOverLosesTheReplica(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.Deploy(ctx, parkingSpec(t, "refuser", 1, map[string]string{"HTTPFN_HANDOVER_FAIL": "no GPU for me"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a process parked and waiting", func() bool { return parkedReady(b, "refuser") == 1 })
	refused := parkedNow(b)[0]
	pid := procOf(t, refused.run).pid()
	if err := b.Scale(ctx, DefaultNamespace, "refuser", 2); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "two replicas serving, none the refusing process", func() bool {
		rt, err := b.Route(DefaultNamespace, "refuser", "")
		if err != nil || len(rt.Endpoints) != 2 {
			return false
		}
		for _, ep := range rt.Endpoints {
			if ep.URL == refused.run.URL() {
				t.Fatalf("the process that refused its hand-over serves as %s", ep.ID)
			}
		}
		return true
	})
	// It was taken, refused and stopped; not left parked.
	eventually(t, 10*time.Second, "the refusing process stopped", func() bool { return syscall.Kill(pid, 0) != nil })
	if slices.Contains(parkedNow(b), refused) {
		t.Fatal("the refusing process is still parked")
	}
}

// Only a function run as an HTTP-mode process of its own is parked; one
// that asks and is an emulated worker runs without, and deploys as ever.
func TestOnlyHTTPProcessesPark(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	spec := fnSpec("emu", 30, 2<<30)
	spec.Scale.Parked = 2
	if err := b.Deploy(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	ready, starting := b.core.Parked(key(DefaultNamespace, "emu"))
	b.mu.Unlock()
	if ready+starting != 0 || len(parkedNow(b)) != 0 {
		t.Fatalf("an emulated function has %d parked, %d parking", ready, starting)
	}
}

// A parked process that cannot be started is not counted as on its way:
// the core is told it is gone, and asks for another at its next tick.
func TestUnstartableParkedProcessIsGone(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	spec := parkingSpec(t, "broken", 1, nil)
	spec.Deployment.EnvProcess = filepath.Join(t.TempDir(), "no-such-program")
	if err := b.Deploy(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	ready, starting := b.core.Parked(key(DefaultNamespace, "broken"))
	b.mu.Unlock()
	if ready+starting != 0 || len(parkedNow(b)) != 0 {
		t.Fatalf("a process that could not start counts as parked: %d ready, %d starting, %d running", ready, starting, len(parkedNow(b)))
	}
}

// A function that does not say parks by default where it runs as an
// HTTP-mode process whose server declares it speaks /_/gpu; one whose
// server then answers /_/gpu as a replica would (a 404) is found out by
// its first parked process, which ends, and parks nothing more, while its
// replicas serve as ever. One that does not declare it parks nothing.
func TestParkedByDefaultUnlessTheServerCannot(t *testing.T) {
	tests := []struct {
		name       string
		env        map[string]string
		wantParked bool
	}{
		{"declares it and speaks /_/gpu", map[string]string{"FAAS_GPU_PARKABLE": "1"}, true},
		{"declares it and does not", map[string]string{"FAAS_GPU_PARKABLE": "1", "HTTPFN_UNPARKABLE": "1"}, false},
		{"does not declare it", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBackend(t, t.TempDir())
			defer b.Close(context.Background())
			ctx := context.Background()
			spec := parkingSpec(t, "fn", 0, tt.env)
			spec.Scale.ParkedAuto, spec.Scale.ParkedDefault = true, true // no com.openfaas.gpu.parked
			if err := b.Deploy(ctx, spec); err != nil {
				t.Fatal(err)
			}
			k := key(DefaultNamespace, "fn")
			if tt.wantParked {
				eventually(t, 10*time.Second, "a process parked and waiting", func() bool { return parkedReady(b, "fn") == 1 })
				return
			}
			eventually(t, 10*time.Second, "the unparkable process ended and parking stopped", func() bool {
				b.mu.Lock()
				defer b.mu.Unlock()
				ready, starting := b.core.Parked(k)
				return ready+starting == 0 && len(b.parked) == 0 && b.core.ParkedTarget(k) == 0
			})
			if spec.Deployment.EnvVars["FAAS_GPU_PARKABLE"] == "1" {
				rep, err := b.GPUReport(ctx)
				if err != nil || len(rep.Functions) != 1 || !strings.Contains(rep.Functions[0].ParkedRefused, "404") {
					t.Fatalf("GPU report: want the function's parkedRefused to say /_/gpu answered 404, got %+v, %v", rep.Functions, err)
				}
			}
			if err := b.Scale(ctx, DefaultNamespace, "fn", 2); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "two replicas serving", func() bool {
				rt, err := b.Route(DefaultNamespace, "fn", "")
				return err == nil && len(rt.Endpoints) == 2
			})
			if n := len(parkedNow(b)); n != 0 {
				t.Fatalf("%d processes parked again after the server showed it cannot be", n)
			}
		})
	}
}

// A parked process that exits before it ever waits for its settings (a
// server that cannot start without a GPU) is a refusal too: the default
// must not keep a crash loop per function that cannot be parked.
func TestParkedProcessThatExitsFirstIsARefusal(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	spec := parkingSpec(t, "crasher", 0, map[string]string{"FAAS_GPU_PARKABLE": "1"})
	spec.Scale.ParkedAuto, spec.Scale.ParkedDefault = true, true
	spec.Deployment.EnvProcess = "false"
	if err := b.Deploy(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	k := key(DefaultNamespace, "crasher")
	eventually(t, 10*time.Second, "the crashing parked process ended and parking stopped", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		ready, starting := b.core.Parked(k)
		return ready+starting == 0 && len(b.parked) == 0 && b.core.ParkedTarget(k) == 0
	})
}
