package local

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap/zaptest"
)

func report(t *testing.T, b *Backend) scheduler.ClusterReport {
	t.Helper()
	rep, err := b.GPUReport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// readyAfter lists each ready replica's readyAfterSeconds, failing for a
// ready replica without one.
func readyAfter(t *testing.T, rep scheduler.ClusterReport) []float64 {
	t.Helper()
	var out []float64
	for _, n := range rep.Nodes {
		for _, g := range n.GPUs {
			for _, r := range g.Replicas {
				if !r.Ready {
					continue
				}
				if r.ReadyAfterSeconds == nil || *r.ReadyAfterSeconds <= 0 {
					t.Errorf("ready replica %s: readyAfterSeconds = %v, want its start-up", r.ID, r.ReadyAfterSeconds)
					continue
				}
				out = append(out, *r.ReadyAfterSeconds)
			}
		}
	}
	return out
}

// TestStatsCountPlacementsByResult: every placement attempt counts once,
// by its outcome, with its reason code while pending; every replica placed
// is timed to ready.
func TestStatsCountPlacementsByResult(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	type want struct {
		placed, pending uint64
		codes           map[scheduler.NoFitCode]int
	}
	steps := []struct {
		name string
		do   func() error
		want want
	}{
		// Two GPUs of 16 GiB: two 40 % slices each. Each step below tries
		// every pending replica again.
		{"four fit", func() error {
			for _, n := range []string{"a", "b", "c", "d"} {
				if err := b.Deploy(ctx, fnSpec(n, 40, 2<<30)); err != nil {
					return err
				}
			}
			return nil
		}, want{placed: 4, codes: map[scheduler.NoFitCode]int{}}},
		{"the fifth lacks SM", func() error { return b.Deploy(ctx, fnSpec("e", 40, 2<<30)) },
			want{placed: 4, pending: 1, codes: map[scheduler.NoFitCode]int{scheduler.NoFitSM: 1}}},
		{"a 10 % slice of 13 GiB lacks memory", func() error { return b.Deploy(ctx, fnSpec("m", 10, 13<<30)) },
			want{placed: 4, pending: 3, codes: map[scheduler.NoFitCode]int{scheduler.NoFitSM: 1, scheduler.NoFitMemory: 1}}},
		{"a delete frees a GPU's half for e", func() error { return b.Delete(ctx, DefaultNamespace, "a") },
			want{placed: 5, pending: 4, codes: map[scheduler.NoFitCode]int{scheduler.NoFitMemory: 1}}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		rep := report(t, b)
		d := rep.Stats.Decisions
		if d.Placed != s.want.placed || d.Pending != s.want.pending || d.PlacedWithEviction != 0 {
			t.Errorf("%s: decisions %+v, want placed %d, pending %d", s.name, d, s.want.placed, s.want.pending)
		}
		if d.Seconds.Count != d.Placed+d.Pending {
			t.Errorf("%s: %d attempts timed, want %d", s.name, d.Seconds.Count, d.Placed+d.Pending)
		}
		codes := map[scheduler.NoFitCode]int{}
		for _, p := range rep.Pending {
			codes[p.ReasonCode]++
		}
		if len(codes) != len(s.want.codes) {
			t.Errorf("%s: pending by code %v, want %v", s.name, codes, s.want.codes)
		}
		for c, n := range s.want.codes {
			if codes[c] != n {
				t.Errorf("%s: pending by code %v, want %v", s.name, codes, s.want.codes)
			}
		}
	}
	// Emulated replicas are ready once started: each placement is timed.
	rep := report(t, b)
	if got := len(readyAfter(t, rep)); got != 4 {
		t.Errorf("%d ready replicas report a start-up, want 4", got)
	}
	if n := rep.Stats.StartupSeconds.Count; n != 5 { // a's too, deleted since
		t.Errorf("start-ups counted %d, want 5", n)
	}
}

// TestStatsCountEvictingPlacement: a placement that evicts a warm replica
// is its own result; the eviction itself is the cache's count.
func TestStatsCountEvictingPlacement(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	ctx := context.Background()
	if err := b.Deploy(ctx, fnSpec("a", 10, 16<<30)); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 0); err != nil { // both warm: all memory held
		t.Fatal(err)
	}
	if err := b.Deploy(ctx, fnSpec("b", 10, 16<<30)); err != nil {
		t.Fatal(err)
	}
	rep := report(t, b)
	want := scheduler.Decisions{Placed: 2, PlacedWithEviction: 1}
	if d := rep.Stats.Decisions; d.Placed != want.Placed || d.PlacedWithEviction != want.PlacedWithEviction || d.Pending != 0 {
		t.Fatalf("decisions %+v, want %+v", d, want)
	}
	if rep.Cache.ReplicaEvictions != 1 {
		t.Fatalf("replica evictions = %d, want 1", rep.Cache.ReplicaEvictions)
	}
}

// TestStatsTimeModelLoads: an emulated replica's loads, at its start-up
// and for a request's model, are timed by source as the cache counts them:
// a miss cold, a model the node loaded recently from the node tier.
func TestStatsTimeModelLoads(t *testing.T) {
	const load = 20 * time.Millisecond
	b, err := New(Config{StateDir: t.TempDir(), Inventory: gpu.BuiltinInventory("node-a"),
		Emulation: Emulation{Latency: time.Millisecond, LoadTime: load}, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	ctx := context.Background()
	// Two functions of one model, each on its own GPU.
	for _, n := range []string{"a", "b"} {
		spec := fnSpec(n, 60, 2<<30)
		spec.GPU.Model = "shared"
		if err := b.Deploy(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	invoke := func(fn, model string) string {
		t.Helper()
		eps, err := b.Replicas(DefaultNamespace, fn)
		if err != nil || len(eps) != 1 {
			t.Fatalf("%s: endpoints %v, %v", fn, eps, err)
		}
		req, _ := http.NewRequest(http.MethodPost, eps[0].URL, strings.NewReader("x"))
		if model != "" {
			req.Header.Set(headerModel, model)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get(headerCache)
	}
	// Each replica loads its function's model before it is ready: a's
	// cold, b's from the node tier (a's load put it there); requests then
	// hit, but for another model.
	for _, n := range []string{"a", "b"} {
		eventually(t, 5*time.Second, n+" ready", func() bool {
			eps, err := b.Replicas(DefaultNamespace, n)
			return err == nil && len(eps) == 1
		})
	}
	var got []string
	for _, c := range []struct{ fn, model string }{{"a", ""}, {"a", ""}, {"b", ""}, {"b", "other"}} {
		got = append(got, invoke(c.fn, c.model))
	}
	if want := "hit hit hit miss"; strings.Join(got, " ") != want {
		t.Fatalf("cache outcomes %v, want %s", got, want)
	}
	rep := report(t, b)
	loads := rep.Stats.ModelLoadSeconds
	cold, node := loads[scheduler.ModelLoadCold], loads[scheduler.ModelLoadNode]
	if cold.Count+node.Count != rep.Cache.Misses+rep.Cache.NodeHits || cold.Count != 2 || node.Count != 1 {
		t.Fatalf("loads timed cold %d, node %d; the cache counted %d misses, %d node hits", cold.Count, node.Count, rep.Cache.Misses, rep.Cache.NodeHits)
	}
	nodeLoad := time.Duration(float64(load) * b.cfg.NodeLoadFactor)
	if cold.Sum != 2*load.Seconds() || node.Sum != nodeLoad.Seconds() {
		t.Fatalf("load time cold %gs, node %gs; want %gs and %gs", cold.Sum, node.Sum, 2*load.Seconds(), nodeLoad.Seconds())
	}
}

// TestStatsTimeAProcessStartup: a process replica is timed until its
// runner finds it answering.
func TestStatsTimeAProcessStartup(t *testing.T) {
	b := newBackend(t, t.TempDir())
	defer b.Close(context.Background())
	spec := asHTTPFn(t, fnSpec("proc", 30, 2<<30), nil)
	if err := b.Deploy(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "proc ready and timed", func() bool {
		return report(t, b).Stats.StartupSeconds.Count == 1
	})
	rep := report(t, b)
	if n := len(readyAfter(t, rep)); n != 1 {
		t.Fatalf("%d ready replicas report a start-up, want 1", n)
	}
}

// TestStatsCountAutoscalerActions: an applied decision counts once, up or
// down; scaling to zero is down.
func TestStatsCountAutoscalerActions(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	spec := modelSpec("z", "resnet50", 50*time.Millisecond)
	spec.Scale.Zero, spec.Scale.ZeroDuration = true, 30*time.Second
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	actions := func() scheduler.ScaleActions {
		t.Helper()
		rep := report(t, b)
		if len(rep.Stats.Autoscaler) != 1 {
			t.Fatalf("autoscaler actions %+v, want one function's", rep.Stats.Autoscaler)
		}
		return rep.Stats.Autoscaler[0]
	}
	t0 := time.Now()
	b.Tick(t0.Add(time.Minute))
	if a := actions(); a.Function != "z" || a.Namespace != DefaultNamespace || a.Up != 0 || a.Down != 1 {
		t.Fatalf("after an idle minute: %+v, want one down", a)
	}
	for range 100 {
		request(b, DefaultNamespace, "z")
	}
	b.Tick(t0.Add(time.Minute + time.Second))
	if a := actions(); a.Up != 1 || a.Down != 1 {
		t.Fatalf("after requests at zero: %+v, want one up, one down", a)
	}
	if st, _ := b.Status(ctx, DefaultNamespace, "z"); st.Replicas == 0 {
		t.Fatal("requests at zero must scale the function up")
	}
}
