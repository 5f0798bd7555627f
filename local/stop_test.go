package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/logs"
	"go.uber.org/zap"
)

// alive is whether pid is a process that still runs: a zombie does not
// count, as nothing may reap a grandchild reparented in a container.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows the last ')'.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// readPID waits for a pid file the replica writes.
func readPID(t *testing.T, path string) int {
	t.Helper()
	var pid int
	eventually(t, 10*time.Second, "pid file "+path, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil && pid > 0
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// grandparentSpec is a process function whose replica, like a shell
// wrapper, leaves a child of its own running (its pid in GRANDCHILD_PID)
// and, with everything in its group, ignores SIGTERM: only a kill of the
// whole group ends it.
func grandparentSpec(t *testing.T, name, pidFile string) scheduler.Function {
	t.Helper()
	script := filepath.Join(t.TempDir(), "wrapper.sh")
	body := "#!/bin/sh\ntrap '' TERM\nsleep 300 &\necho $! > \"$GRANDCHILD_PID\"\nexec " + httpfnBinary(t) + "\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := fnSpec(name, 20, 1<<30)
	spec.Scale.Min = 0
	spec.Deployment.EnvProcess = script
	spec.Deployment.EnvVars = map[string]string{"mode": "http", "HTTPFN_IGNORE_TERM": "1", "GRANDCHILD_PID": pidFile}
	return spec
}

// TestCloseEndsGrandchildren: replicas stopped in the background (an
// update's old ones, a warm replica past its TTL) are waited for by Close,
// and their whole process group ends with the provider.
func TestCloseEndsGrandchildren(t *testing.T) {
	tests := []struct {
		name string
		// retire takes the replica out in the background; it returns once
		// the stop is under way.
		retire func(t *testing.T, b *Backend, spec scheduler.Function)
	}{
		{name: "update", retire: func(t *testing.T, b *Backend, spec scheduler.Function) {
			spec.Deployment.EnvVars = map[string]string{"mode": "http"} // the new replicas stop at once
			spec.Deployment.EnvProcess = httpfnBinary(t)
			if err := b.Update(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "warm replica expired", retire: func(t *testing.T, b *Backend, spec scheduler.Function) {
			if err := b.Scale(context.Background(), DefaultNamespace, spec.Name(), 0); err != nil {
				t.Fatal(err)
			}
			b.Tick(time.Now().Add(b.cfg.WarmTTL + time.Minute))
			if n := len(b.core.Allocator().Placements()); n != 0 {
				t.Fatalf("%d bookings after the TTL, want the warm replica gone", n)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBackend(t, t.TempDir())
			pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
			spec := grandparentSpec(t, "gp", pidFile)
			if err := b.Deploy(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			grandchild := readPID(t, pidFile)
			eventually(t, 10*time.Second, "gp ready", func() bool {
				st, _ := b.Status(context.Background(), DefaultNamespace, "gp")
				return st.AvailableReplicas == 1
			})
			tc.retire(t, b, spec)
			// A provider on its way out gives its replicas little time.
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			if err := b.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The group was killed before Close returned; the kernel may take
			// a moment to end a process it signalled. Far less than the 5 s
			// stop grace a stop left running would still wait.
			eventually(t, time.Second, fmt.Sprintf("grandchild %d of a stopped replica to end after Close", grandchild), func() bool { return !alive(grandchild) })
		})
	}
}

// TestDeleteKeepsShutdownOutputOutOfTheNextFunction: what a replica prints
// while it stops reaches the deleted function's followers, and never the
// log of a later function with the same name.
func TestDeleteKeepsShutdownOutputOutOfTheNextFunction(t *testing.T) {
	ctx := context.Background()
	b := newBackend(t, t.TempDir())
	defer b.Close(ctx)
	const bye = "httpfn: SIGTERM, shutting down"
	spec := asHTTPFn(t, fnSpec("f", 20, 1<<30), map[string]string{"HTTPFN_TERM_MESSAGE": bye})
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "f ready", func() bool {
		st, _ := b.Status(ctx, DefaultNamespace, "f")
		return st.AvailableReplicas == 1
	})
	followCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	follow, err := b.Query(followCtx, logs.Request{Name: "f", Namespace: DefaultNamespace, Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, DefaultNamespace, "f"); err != nil {
		t.Fatal(err)
	}
	var followed []string
	for m := range follow { // ends when the function's log is forgotten
		followed = append(followed, m.Text)
	}
	if followCtx.Err() != nil {
		t.Fatal("the follower's stream did not end with the function")
	}
	if !contains(followed, bye) {
		t.Errorf("the follower missed the shutdown line %q: %q", bye, followed)
	}

	if err := b.Deploy(ctx, fnSpec("f", 20, 1<<30)); err != nil {
		t.Fatal(err)
	}
	got, err := b.Query(ctx, logs.Request{Name: "f", Namespace: DefaultNamespace})
	if err != nil {
		t.Fatal(err)
	}
	for m := range got {
		if m.Text == bye || strings.HasPrefix(m.Instance, "f-") && m.Instance != replicaIDs(b, "f") {
			t.Errorf("the new f's log holds the old one's %s: %q", m.Instance, m.Text)
		}
	}
}

func contains(lines []string, s string) bool {
	for _, l := range lines {
		if l == s {
			return true
		}
	}
	return false
}

// replicaIDs is the id of fn's one replica.
func replicaIDs(b *Backend, name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	fn, ok := b.core.Function(key(DefaultNamespace, name))
	if !ok || len(fn.Live) != 1 {
		return ""
	}
	return fn.Live[0].ID
}

// TestClassicRequestLeavesNoProcess: what a classic function's process
// leaves running in the background ends with its request.
func TestClassicRequestLeavesNoProcess(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild.pid")
	script := filepath.Join(dir, "fork.sh")
	body := "#!/bin/sh\nsleep 300 </dev/null >/dev/null 2>&1 &\necho $! > " + pidFile + "\necho forked\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := emulatedSpec(0, 0)
	spec.Process, spec.WorkDir = script, dir
	r := newClassicRunner(spec, func(string, string) {}, zap.NewNop())
	startRunner(t, r)
	if rep := do(t, "POST", r.URL()+"/", "", nil); rep.status != 200 || strings.TrimSpace(rep.body) != "forked" {
		t.Fatalf("%d %q", rep.status, rep.body)
	}
	grandchild := readPID(t, pidFile)
	eventually(t, time.Second, fmt.Sprintf("the request's background process %d to end", grandchild), func() bool { return !alive(grandchild) })
}

// A replica whose booking no longer fits when the GPUs change (its GPU's
// memory shrunk below what its replicas hold) is stopped by the core
// without a booking; its worker must end as any stopped one does, so that
// nothing of it runs beside what the core holds (k8s drains its pod:
// k8s.TestReplicaLostInARebookDrainsItsPod).
func TestReplicaLostInARebookStops(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if err := b.Deploy(ctx, fnSpec(name, 30, 4<<30)); err != nil {
			t.Fatal(err)
		}
	}
	lost := replicaIDs(b, "b")
	where := placements(t, b)
	if lost == "" || where[lost].GPUs[0] != where[replicaIDs(b, "a")].GPUs[0] {
		t.Fatalf("a and b not on one GPU: %+v", where)
	}
	inv := gpu.BuiltinInventory("node-a")
	for i := range inv.Nodes[0].GPUs {
		if inv.Nodes[0].GPUs[i].UUID == where[lost].GPUs[0] {
			inv.Nodes[0].GPUs[i].MemoryBytes = 6 << 30 // a, the older, keeps its 4 GiB
		}
	}
	b.SetInventory(inv)
	b.mu.Lock()
	_, running := b.running[lost]
	_, booked := b.core.Replica(lost)
	b.mu.Unlock()
	if booked || running {
		t.Fatalf("b's replica %s after the shrink: booked %v, running %v; want neither", lost, booked, running)
	}
}
