package lifecycle

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// inventory is nodes × gpus V100-sized GPUs of 16 GiB.
func inventory(nodes, gpus int) gpu.Inventory {
	inv := gpu.Inventory{Source: "test"}
	for n := range nodes {
		node := gpu.Node{Name: fmt.Sprintf("n%d", n)}
		for g := range gpus {
			node.GPUs = append(node.GPUs, gpu.Device{UUID: fmt.Sprintf("GPU-%d-%d", n, g), Node: node.Name, Index: g,
				Product: "Tesla-V100-SXM2-16GB", MemoryBytes: 16 << 30, SMCount: 80})
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	return inv
}

// fn is a function with no profile asking sm % and mem GiB, min..max
// replicas.
func fn(name string, sm int, memGiB int64, min, max int) scheduler.Function {
	return scheduler.Function{
		Deployment: types.FunctionDeployment{Service: name, Namespace: "openfaas-fn", Image: "x"},
		GPU:        gpu.Request{Model: name, SMPercent: sm, MemoryBytes: memGiB << 30},
		Scale:      scheduler.ScalePolicy{Min: min, Max: max, ZeroDuration: time.Minute},
	}
}

// builtinStore is the built-in profiles.
func builtinStore(t *testing.T) *profiles.Store {
	t.Helper()
	store, err := profiles.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// rnKey is rnSpec's function.
const rnKey = "openfaas-fn/rn"

// rnSpec is resnet50 at a 100-ms SLO, 1 to 20 replicas: profiled, so
// autoscaled.
func rnSpec() scheduler.Function {
	return scheduler.Function{
		Deployment: types.FunctionDeployment{Service: "rn", Namespace: "openfaas-fn", Image: "x"},
		GPU:        gpu.Request{Model: "resnet50", SLO: 100 * time.Millisecond},
		Scale:      scheduler.ScalePolicy{Min: 1, Max: 20},
	}
}

// steadyRN deploys rnSpec on gpus GPUs of one node at t0 and runs it
// steady (perSecond requests a second for seconds); it returns the core,
// the load it was told and the last tick's time.
func steadyRN(t *testing.T, store *profiles.Store, gpus int, perSecond uint64, seconds int) (*Core, *Load, time.Time) {
	t.Helper()
	c := New(inventory(1, gpus), nil, Options{Profiles: store})
	if _, err := c.Deploy(rnSpec(), t0); err != nil {
		t.Fatal(err)
	}
	l := &Load{}
	return c, l, steady(c, rnKey, l, perSecond, seconds)
}

// tickWith counts n more requests of function key, the last at now, into
// l, tells c, and ticks it at now.
func tickWith(c *Core, key string, l *Load, n uint64, now time.Time) Result {
	l.Requests += n
	l.LastRequest = now
	c.ObserveLoad(key, *l)
	return c.Tick(now)
}

// steady runs function key at perSecond requests a second for seconds
// from t0, ticking c each second and reporting every replica started
// ready at once; it returns the last tick's time.
func steady(c *Core, key string, l *Load, perSecond uint64, seconds int) time.Time {
	var now time.Time
	for s := 1; s <= seconds; s++ {
		now = t0.Add(time.Duration(s) * time.Second)
		tickWith(c, key, l, perSecond, now)
		readyAll(c, now)
	}
	return now
}

// readyAll reports every starting replica of c ready at now.
func readyAll(c *Core, now time.Time) {
	for id, r := range c.replicas {
		if r.phase == Starting {
			c.ReplicaReady(id, now)
		}
	}
}

// kinds lists effects as "kind function replica" for comparison.
func kinds(res Result) []string {
	var out []string
	for _, e := range res.Effects {
		s := string(e.Kind) + " " + e.Function
		if e.Replica.ID != "" {
			s += " " + e.Replica.ID
		}
		out = append(out, s)
	}
	return out
}

func TestDeployPlacesAndWritesFirst(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{})
	res, err := c.Deploy(fn("a", 30, 2, 2, 5), t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"write openfaas-fn/a", "start openfaas-fn/a a-1", "start openfaas-fn/a a-2"}
	if got := kinds(res); !slices.Equal(got, want) {
		t.Fatalf("effects = %q, want %q", got, want)
	}
	if rec := res.Effects[0].Record; rec.Replicas != 2 || len(rec.Placed) != 2 {
		t.Fatalf("record = %+v, want 2 replicas, 2 placed", rec)
	}
	if _, err := c.Deploy(fn("a", 30, 2, 1, 1), t0); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second deploy: %v, want ErrExist", err)
	}
	if u := c.Usage()[0]; len(u.Replicas) != 2 {
		t.Fatalf("bookings = %d, want 2", len(u.Replicas))
	}
}

func TestDeployRejectsWhatCanNeverFit(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{})
	_, err := c.Deploy(fn("huge", 30, 64, 1, 1), t0)
	if err == nil {
		t.Fatal("a 64 GiB slice on 16 GiB GPUs was accepted")
	}
	if c.Has(Key("openfaas-fn", "huge")) {
		t.Fatal("a refused function was kept")
	}
}

func TestScaleDemotesThenPromotes(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{})
	if _, err := c.Deploy(fn("a", 30, 2, 0, 5), t0); err != nil {
		t.Fatal(err)
	}
	res, n, err := c.Scale("openfaas-fn", "a", 0, t0)
	if err != nil || n != 0 {
		t.Fatalf("scale 0: %d, %v", n, err)
	}
	if got, want := kinds(res), []string{"write openfaas-fn/a", "demote openfaas-fn/a a-1"}; !slices.Equal(got, want) {
		t.Fatalf("scale down effects = %q, want %q", got, want)
	}
	v, _ := c.Function(Key("openfaas-fn", "a"))
	if len(v.Live) != 0 || len(v.Warm) != 1 || v.Warm[0].Phase != Warm {
		t.Fatalf("after scale 0: live %d warm %+v", len(v.Live), v.Warm)
	}
	res, _, err = c.Scale("openfaas-fn", "a", 1, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(res), []string{"write openfaas-fn/a", "promote openfaas-fn/a a-1"}; !slices.Equal(got, want) {
		t.Fatalf("scale up effects = %q, want %q (the same replica, no start)", got, want)
	}
}

// An operation whose record cannot be written is undone whole: the
// function, its count and its bookings are as before, and a retry works.
func TestAbortUndoesTheOperation(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{})
	if _, err := c.Deploy(fn("a", 30, 2, 1, 1), t0); err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if c.Has(Key("openfaas-fn", "a")) || len(c.Usage()[0].Replicas) != 0 {
		t.Fatalf("deploy not undone: has %v, bookings %v", c.Has(Key("openfaas-fn", "a")), c.Usage()[0].Replicas)
	}
	if _, err := c.Deploy(fn("a", 30, 2, 1, 5), t0); err != nil {
		t.Fatalf("retry: %v", err)
	}
	before, _ := c.Function(Key("openfaas-fn", "a"))
	for _, n := range []int{3, 0} {
		if _, _, err := c.Scale("openfaas-fn", "a", n, t0); err != nil {
			t.Fatal(err)
		}
		c.Abort()
		after, _ := c.Function(Key("openfaas-fn", "a"))
		if after.Desired != before.Desired || len(after.Live) != len(after.Live) || len(after.Warm) != 0 || after.Live[0].Phase != before.Live[0].Phase {
			t.Fatalf("scale %d not undone: %+v, was %+v", n, after, before)
		}
		if got := len(c.Usage()[0].Replicas); got != 1 {
			t.Fatalf("scale %d undone with %d bookings, want 1", n, got)
		}
	}
	upd := fn("a", 50, 2, 1, 5)
	if _, err := c.Update(upd, t0); err != nil {
		t.Fatal(err)
	}
	c.Abort()
	after, _ := c.Function(Key("openfaas-fn", "a"))
	if after.Spec.GPU.SMPercent != 30 || after.Live[0].Placement == nil || after.Live[0].Placement.Slice.SMPercent != 30 {
		t.Fatalf("update not undone: %+v", after.Live)
	}
	if _, err := c.Delete("openfaas-fn", "a", t0); err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if !c.Has(Key("openfaas-fn", "a")) || len(c.Usage()[0].Replicas) != 1 {
		t.Fatal("delete not undone")
	}
}

// Where stops are confirmed (Kubernetes), a stopped replica keeps its
// booking until it is gone, and what waits for the room is placed then.
func TestConfirmedStopsHoldTheBooking(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{ConfirmStops: true})
	if _, err := c.Deploy(fn("a", 80, 2, 1, 1), t0); err != nil {
		t.Fatal(err)
	}
	res, err := c.Update(fn("a", 60, 2, 1, 1), t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(res), []string{"write openfaas-fn/a", "stop openfaas-fn/a a-1"}; !slices.Equal(got, want) {
		t.Fatalf("update effects = %q, want %q: 80 %% still booked, the new replica waits", got, want)
	}
	v, _ := c.Function(Key("openfaas-fn", "a"))
	if v.Live[0].Phase != Pending {
		t.Fatalf("new replica is %s, want pending", v.Live[0].Phase)
	}
	res = c.ReplicaGone("a-1", t0.Add(time.Second))
	if got, want := kinds(res), []string{"start openfaas-fn/a a-2", "write openfaas-fn/a"}; !slices.Equal(got, want) {
		t.Fatalf("gone effects = %q, want %q", got, want)
	}
}

func TestTickScalesOnLoadAndExpiresWarm(t *testing.T) {
	c := New(inventory(1, 2), nil, Options{WarmTTL: time.Minute})
	// scale to zero, 1 minute idle
	spec := fn("z", 30, 2, 0, 3)
	spec.Scale.Zero = true
	if _, err := c.Deploy(spec, t0); err != nil {
		t.Fatal(err)
	}
	c.ObserveLoad(Key("openfaas-fn", "z"), Load{Requests: 10, LastRequest: t0})
	c.Tick(t0.Add(30 * time.Second))
	if v, _ := c.Function(Key("openfaas-fn", "z")); len(v.Live) != 1 {
		t.Fatalf("scaled away after 30 s of a 1 minute zero-duration: %+v", v)
	}
	res := c.Tick(t0.Add(2 * time.Minute))
	if len(res.Scaled) != 1 || res.Scaled[0].Replicas != 0 {
		t.Fatalf("idle 2 min: scaled %+v, want to zero", res.Scaled)
	}
	if v, _ := c.Function(Key("openfaas-fn", "z")); len(v.Warm) != 1 {
		t.Fatalf("scaled to zero without a warm replica: %+v", v)
	}
	res = c.Tick(t0.Add(4 * time.Minute))
	if got := kinds(res); !slices.Contains(got, "stop openfaas-fn/z z-1") {
		t.Fatalf("warm replica idle past its TTL not stopped: %q", got)
	}
	if got := len(c.Usage()[0].Replicas) + len(c.Usage()[1].Replicas); got != 0 {
		t.Fatalf("%d bookings left after expiry", got)
	}
}

func TestNodeLostReplacesItsReplicas(t *testing.T) {
	inv := inventory(2, 1)
	c := New(inv, nil, Options{})
	if _, err := c.Deploy(fn("a", 100, 2, 2, 2), t0); err != nil {
		t.Fatal(err)
	}
	v, _ := c.Function(Key("openfaas-fn", "a"))
	lostNode := v.Live[1].Placement.Node
	keep := inv
	keep.Nodes = slices.DeleteFunc(slices.Clone(inv.Nodes), func(n gpu.Node) bool { return n.Name == lostNode })
	res := c.SetInventory(keep, t0.Add(time.Second))
	if got := kinds(res); !slices.Contains(got, "stop openfaas-fn/a "+v.Live[1].ID) {
		t.Fatalf("lost replica not stopped: %q", got)
	}
	v, _ = c.Function(Key("openfaas-fn", "a"))
	if len(v.Live) != 2 || v.Live[1].Phase != Pending {
		t.Fatalf("after node loss: %+v, want one placed and one pending", v.Live)
	}
	res = c.SetInventory(inv, t0.Add(2*time.Second))
	if got := kinds(res); !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "start openfaas-fn/a") }) {
		t.Fatalf("node back, pending replica not started: %q", got)
	}
}

func TestRestoreWritesOnlyWhatChanged(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{})
	res, err := c.Deploy(fn("a", 30, 2, 2, 2), t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Deploy(fn("b", 30, 2, 1, 1), t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	b, _ := c.Function(Key("openfaas-fn", "b"))
	recA := *res.Effects[0].Record
	recB := Record{Function: b.Spec, Replicas: 1, CreatedAt: b.CreatedAt, Placed: []PlacedReplica{{ID: b.Live[0].ID, Placement: *b.Live[0].Placement, Config: b.Live[0].Config}}}

	c2 := New(inventory(1, 1), nil, Options{})
	res, report := c2.Restore([]Record{recA, recB}, t0.Add(time.Hour))
	if len(report) != 0 {
		t.Fatalf("report = %+v, want none", report)
	}
	if got, want := kinds(res), []string{"start openfaas-fn/a a-1", "start openfaas-fn/a a-2", "start openfaas-fn/b b-3"}; !slices.Equal(got, want) {
		t.Fatalf("restore effects = %q, want %q: no write of unchanged records", got, want)
	}
	// A booking on a GPU that is gone.
	gone := recA.Placed[0].Placement
	gone.GPUs = []string{"GPU-gone"}
	recA.Placed = append(recA.Placed, PlacedReplica{ID: "a-8", Placement: gone, Config: recA.Placed[0].Config})
	recA.Replicas = 3
	c3 := New(inventory(1, 1), nil, Options{})
	res, report = c3.Restore([]Record{recA, recB}, t0.Add(time.Hour))
	if len(report) != 1 || len(report[0].Lost) != 1 {
		t.Fatalf("report = %+v, want one lost booking", report)
	}
	if got := kinds(res); !slices.Contains(got, "write openfaas-fn/a") || slices.Contains(got, "write openfaas-fn/b") {
		t.Fatalf("restore effects = %q, want a write of a only", got)
	}
}

func TestPlacementEvictsWarmReplicas(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{})
	if _, err := c.Deploy(fn("old", 50, 12, 0, 1), t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Scale("openfaas-fn", "old", 0, t0); err != nil {
		t.Fatal(err)
	}
	res, err := c.Deploy(fn("new", 50, 12, 1, 1), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := kinds(res)
	for _, w := range []string{"write openfaas-fn/new", "stop openfaas-fn/old old-1", "write openfaas-fn/old", "start openfaas-fn/new new-2"} {
		if !slices.Contains(got, w) {
			t.Fatalf("effects %q lack %q", got, w)
		}
	}
	if v, _ := c.Function(Key("openfaas-fn", "old")); len(v.Warm) != 0 {
		t.Fatalf("evicted replica still warm: %+v", v.Warm)
	}
}

func TestRenderEnv(t *testing.T) {
	spec := fn("a", 30, 2, 1, 1)
	spec.Deployment.EnvProcess = "python index.py"
	spec.Deployment.EnvVars = map[string]string{"B": "2", "A": "1", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"}
	p := scheduler.Placement{Node: "n0", GPUs: []string{"GPU-x", "GPU-y"}, Slice: gpu.Slice{SMPercent: 30, MemoryBytes: 2 << 30}}
	cases := []struct {
		name string
		in   EnvInput
		want map[string]string
	}{
		{"local process", EnvInput{Spec: spec, Model: "m", Config: scheduler.SliceConfig{SMPercent: 30, Batch: 4}, Placement: p, Replica: "a-1"},
			map[string]string{"fprocess": "python index.py", "A": "1", "CUDA_VISIBLE_DEVICES": "GPU-x,GPU-y", "NVIDIA_VISIBLE_DEVICES": "GPU-x,GPU-y",
				"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M,1=2048M", "FAAS_GPU_BATCH": "4", "FAAS_GPU_REPLICA": "a-1",
				"CUDA_MPS_PIPE_DIRECTORY": DefaultMPSPipeDir, "FAAS_GPU_MODEL": "m"}},
		{"container", EnvInput{Spec: spec, Model: "m", Config: scheduler.SliceConfig{SMPercent: 30, Batch: 1}, Placement: p, InContainer: true, Devices: []string{"0", "3"}, Group: "g"},
			map[string]string{"CUDA_VISIBLE_DEVICES": "0,1", "NVIDIA_VISIBLE_DEVICES": "0,3", "FAAS_GPU_BATCH": "1", "FAAS_GPU_REPLICA_GROUP": "g"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := RenderEnv(tc.in)
			got := map[string]string{}
			for _, e := range env {
				if _, dup := got[e.Name]; dup {
					t.Fatalf("%s set twice", e.Name)
				}
				got[e.Name] = e.Value
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
	// The function's own batch wins, in every backend.
	spec.Deployment.EnvVars["FAAS_GPU_BATCH"] = "8"
	for _, inContainer := range []bool{false, true} {
		n := 0
		for _, e := range RenderEnv(EnvInput{Spec: spec, Config: scheduler.SliceConfig{Batch: 2}, Placement: p, InContainer: inContainer}) {
			if e.Name == "FAAS_GPU_BATCH" {
				n++
				if e.Value != "8" {
					t.Errorf("container %v: FAAS_GPU_BATCH = %s, want the function's 8", inContainer, e.Value)
				}
			}
		}
		if n != 1 {
			t.Errorf("container %v: FAAS_GPU_BATCH set %d times", inContainer, n)
		}
	}
}

// A backend that cannot keep warm replicas stops what it scales away.
func TestNoWarmStopsWhatScalesDown(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{NoWarm: true, ConfirmStops: true})
	if _, err := c.Deploy(fn("a", 30, 2, 0, 5), t0); err != nil {
		t.Fatal(err)
	}
	res, _, err := c.Scale("openfaas-fn", "a", 0, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kinds(res), []string{"write openfaas-fn/a", "stop openfaas-fn/a a-1"}; !slices.Equal(got, want) {
		t.Fatalf("scale down effects = %q, want %q", got, want)
	}
	if v, _ := c.Function(Key("openfaas-fn", "a")); len(v.Warm) != 0 {
		t.Fatalf("warm replicas kept: %+v", v.Warm)
	}
	if got := len(c.Usage()[0].Replicas); got != 1 {
		t.Fatalf("%d bookings while the stop is unconfirmed, want 1", got)
	}
	c.ReplicaGone("a-1", t0)
	if got := len(c.Usage()[0].Replicas); got != 0 {
		t.Fatalf("%d bookings once gone, want 0", got)
	}
}

// Where stops are confirmed, a placement that needs a warm replica's
// memory evicts it and waits: the evicted replica drains with its memory
// booked until it is gone, then the new one is placed there.
func TestConfirmedEvictionWaitsForTheWarmReplica(t *testing.T) {
	c := New(inventory(1, 1), nil, Options{ConfirmStops: true})
	if _, err := c.Deploy(fn("old", 50, 12, 0, 1), t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Scale("openfaas-fn", "old", 0, t0); err != nil {
		t.Fatal(err)
	}
	res, err := c.Deploy(fn("new", 50, 12, 1, 1), t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got := kinds(res)
	if !slices.Contains(got, "stop openfaas-fn/old old-1") || slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "start openfaas-fn/new") }) {
		t.Fatalf("effects %q: want the warm replica stopped and the new one not started yet", got)
	}
	if v, _ := c.Function(Key("openfaas-fn", "new")); v.Live[0].Phase != Pending {
		t.Fatalf("new replica is %s while the evicted one drains", v.Live[0].Phase)
	}
	if u := c.Usage()[0]; u.MemoryAllocated != 12<<30 {
		t.Fatalf("%d bytes booked while the evicted replica drains, want its 12 GiB", u.MemoryAllocated)
	}
	res = c.ReplicaGone("old-1", t0.Add(2*time.Second))
	if got := kinds(res); !slices.Contains(got, "start openfaas-fn/new new-2") {
		t.Fatalf("once gone: %q, want the new replica started", got)
	}
}

// A replica lost with its node or GPU is stopped with the placement it
// had: where the GPU is still there (a rebook it no longer fits), its
// process or pod still runs on it, and the backend needs to know where to
// drain it (k8s holds that GPU until the pod is gone).
func TestLostReplicaIsStoppedWhereItRan(t *testing.T) {
	tests := []struct {
		name   string
		change func(inv gpu.Inventory, where scheduler.Placement) gpu.Inventory
	}{
		{"its node removed", func(inv gpu.Inventory, where scheduler.Placement) gpu.Inventory {
			inv.Nodes = slices.DeleteFunc(slices.Clone(inv.Nodes), func(n gpu.Node) bool { return n.Name == where.Node })
			return inv
		}},
		{"its GPU's memory shrunk below its booking", func(inv gpu.Inventory, where scheduler.Placement) gpu.Inventory {
			out := gpu.Inventory{Source: inv.Source}
			for _, n := range inv.Nodes {
				n.GPUs = slices.Clone(n.GPUs)
				for i := range n.GPUs {
					if n.GPUs[i].UUID == where.GPUs[0] {
						n.GPUs[i].MemoryBytes = 6 << 30
					}
				}
				out.Nodes = append(out.Nodes, n)
			}
			return out
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := inventory(2, 1)
			c := New(inv, nil, Options{ConfirmStops: true})
			for _, f := range []scheduler.Function{fn("a", 30, 4, 1, 1), fn("b", 30, 4, 1, 1)} {
				if _, err := c.Deploy(f, t0); err != nil {
					t.Fatal(err)
				}
			}
			a, _ := c.Function(Key("openfaas-fn", "a"))
			b, _ := c.Function(Key("openfaas-fn", "b"))
			where := *b.Live[0].Placement
			if a.Live[0].Placement.GPUs[0] != where.GPUs[0] {
				t.Fatalf("a on %v, b on %v: want one GPU", a.Live[0].Placement.GPUs, where.GPUs)
			}
			res := c.SetInventory(tt.change(inv, where), t0.Add(time.Second))
			var stop *Effect
			for i, e := range res.Effects {
				if e.Kind == Stop && e.Replica.ID == b.Live[0].ID {
					stop = &res.Effects[i]
				}
			}
			if stop == nil {
				t.Fatalf("b's replica not stopped: %q", kinds(res))
			}
			if stop.Replica.Placement == nil || !slices.Equal(stop.Replica.Placement.GPUs, where.GPUs) {
				t.Fatalf("b's Stop names placement %+v; want where it ran, %v", stop.Replica.Placement, where.GPUs)
			}
			if _, held := c.Replica(b.Live[0].ID); held {
				t.Errorf("b's lost replica is still held by the core")
			}
		})
	}
}
