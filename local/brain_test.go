package local

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
	"go.uber.org/zap/zaptest"
)

var (
	builtinOnce  sync.Once
	builtinStore *profiles.Store
)

func builtinProfiles(t *testing.T) *profiles.Store {
	t.Helper()
	builtinOnce.Do(func() {
		s, err := profiles.Builtin()
		if err != nil {
			panic(err)
		}
		builtinStore = s
	})
	return builtinStore
}

func newProfiledBackend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(Config{
		StateDir:  t.TempDir(),
		Inventory: gpu.BuiltinInventory("node-a"),
		Profiles:  builtinProfiles(t),
		Autoscale: scheduler.AutoscaleOptions{Headroom: 1.2, CoolDown: 10 * time.Second},
		Load:      handlers.NewLoadBook(),
		Log:       zaptest.NewLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func modelSpec(name, model string, slo time.Duration) scheduler.Function {
	f := scheduler.Function{
		Deployment: types.FunctionDeployment{Service: name, Image: "img", Namespace: DefaultNamespace},
		GPU:        gpu.Request{Model: model, SLO: slo},
		Scale:      scheduler.ScalePolicy{Min: 1, Max: 10, ZeroDuration: time.Minute},
	}
	return f
}

func TestProfileChoosesTheSlice(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	if err := b.Deploy(ctx, modelSpec("rn", "resnet50", 50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	// The slice is planned by the queueing model the autoscaler uses: the
	// most capacity within the 50-ms SLO at p99 per SM %, and the decision
	// says so.
	p, _, _ := builtinProfiles(t).Lookup("resnet50", gpu.V100Product)
	want, err := scheduler.ChooseSlice(p, 50*time.Millisecond, scheduler.ChooseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(want.Explanation, "req/s within SLO 50ms at p99") {
		t.Fatalf("the decision must name the capacity at the SLO: %s", want.Explanation)
	}
	rep, _ := b.GPUReport(ctx)
	fr := rep.Functions[0]
	if fr.SMPercent != want.SMPercent || fr.Batch != want.Batch || !fr.Autoscaled || fr.Decision != want.Explanation {
		t.Fatalf("function report = %+v, want the profile's choice %+v", fr, want)
	}
	if fr.MemoryBytes != p.MemoryBytes {
		t.Fatalf("memory = %d, want the profile's footprint %d", fr.MemoryBytes, p.MemoryBytes)
	}
	var fe *gpu.FieldError
	if err := b.Deploy(ctx, modelSpec("fast", "resnet50", time.Millisecond)); err == nil || !asFieldError(err, &fe) || fe.Field != gpu.AnnotationSLO {
		t.Fatalf("an SLO no slice meets must be refused naming the SLO: %v", err)
	}
}

func asFieldError(err error, fe **gpu.FieldError) bool {
	e, ok := err.(*gpu.FieldError)
	*fe = e
	return ok
}

// TestAutoscalerFollowsTheRate drives the backend's autoscaler with
// synthetic time: requests are counted where the proxy asks for endpoints.
func TestAutoscalerFollowsTheRate(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	// The default max (20): while the smoothed rate climbs, each tick's gap
	// is small and is filled by the smallest slice covering it, so the
	// replicas are many and small (10 are not enough for 3.5 x the plan's
	// base replica).
	spec := modelSpec("rn", "resnet50", 50*time.Millisecond)
	spec.Scale.Max = scheduler.DefaultMaxReplicas
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	fn, _ := coreView(b, key(DefaultNamespace, "rn"))
	perReplica := fn.Plan.Base.Throughput
	t0 := time.Now()
	b.Tick(t0)
	load := func(from, to int, rate float64) time.Time {
		var now time.Time
		for s := from; s < to; s++ {
			for range int(rate) {
				request(b, DefaultNamespace, "rn")
			}
			now = t0.Add(time.Duration(s+1) * time.Second)
			b.Tick(now)
		}
		return now
	}
	rate := 3.5 * perReplica
	load(0, 60, rate)
	st, _ := b.Status(ctx, DefaultNamespace, "rn")
	capacity := 0.0
	fn, _ = coreView(b, key(DefaultNamespace, "rn"))
	for _, r := range fn.Live {
		capacity += r.Config.Throughput
	}
	if capacity < rate || st.Replicas < 4 {
		t.Fatalf("at %.0f req/s (%.1f per replica): %d replicas with %.1f req/s capacity", rate, perReplica, st.Replicas, capacity)
	}
	up := st.Replicas
	// Load drops: after the cool-down, replicas go, and stay warm.
	load(60, 120, perReplica/2)
	st, _ = b.Status(ctx, DefaultNamespace, "rn")
	if st.Replicas >= up || st.Replicas < 1 {
		t.Fatalf("after the load dropped: %d replicas (was %d)", st.Replicas, up)
	}
	if fn, _ = coreView(b, key(DefaultNamespace, "rn")); len(fn.Warm) == 0 {
		t.Fatal("removed replicas must stay warm")
	}
	for _, pl := range b.core.Allocator().Usage() {
		if pl.SMAllocated > 100 || pl.MemoryAllocated > pl.Device.MemoryBytes {
			t.Fatalf("GPU oversubscribed: %+v", pl)
		}
	}
}

func TestScaleToZeroAfterIdle(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	spec := modelSpec("z", "resnet50", 0)
	spec.Scale.Zero, spec.Scale.ZeroDuration = true, 30*time.Second
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	b.Tick(t0.Add(10 * time.Second))
	if st, _ := b.Status(ctx, DefaultNamespace, "z"); st.Replicas != 1 {
		t.Fatalf("replicas = %d before the idle time", st.Replicas)
	}
	b.Tick(t0.Add(time.Minute))
	if st, _ := b.Status(ctx, DefaultNamespace, "z"); st.Replicas != 0 {
		t.Fatalf("replicas = %d after a minute idle with zero-duration 30s", st.Replicas)
	}
}

func TestWarmReplicaExpires(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	if err := b.Deploy(ctx, modelSpec("w", "resnet50", 0)); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "w", 0); err != nil {
		t.Fatal(err)
	}
	if n := len(b.core.Allocator().Placements()); n != 1 {
		t.Fatalf("warm replica must keep its booking, have %d", n)
	}
	b.Tick(time.Now().Add(b.cfg.WarmTTL + time.Second))
	if n := len(b.core.Allocator().Placements()); n != 0 {
		t.Fatalf("warm replica must be gone after the TTL, %d bookings left", n)
	}
	if s := b.cache.Stats(); s.Expirations != 1 {
		t.Fatalf("expirations = %d", s.Expirations)
	}
}

func TestWarmReplicaEvictedWhenMemoryIsNeeded(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	// Two whole-memory functions: warm copies of the first must make room.
	big := func(name string) scheduler.Function {
		s := modelSpec(name, "resnet50", 0)
		s.GPU.SMPercent, s.GPU.MemoryBytes = 10, 16<<30
		return s
	}
	if err := b.Deploy(ctx, big("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 2); err != nil {
		t.Fatal(err)
	}
	if err := b.Scale(ctx, DefaultNamespace, "a", 0); err != nil { // both warm, both GPUs' memory held
		t.Fatal(err)
	}
	if err := b.Deploy(ctx, big("b")); err != nil {
		t.Fatal(err)
	}
	rep, _ := b.GPUReport(ctx)
	if len(rep.Pending) != 0 {
		t.Fatalf("b pending although a warm replica could be evicted: %+v", rep.Pending)
	}
	if s := b.cache.Stats(); s.ReplicaEvictions != 1 {
		t.Fatalf("replica evictions = %d, want 1", s.ReplicaEvictions)
	}
	if a, _ := coreView(b, key(DefaultNamespace, "a")); len(a.Warm) != 1 {
		n := len(a.Warm)
		t.Fatalf("a keeps %d warm replicas, want 1", n)
	}
}

func TestEmulatedReplicaUsesProfileLatency(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	spec := modelSpec("vgg", "vgg16", 0)
	spec.GPU.SMPercent = 10
	deployed := time.Now()
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	p, _, _ := builtinProfiles(t).Lookup("vgg16", gpu.V100Product)
	lat, _, _ := p.SliceLatency(1, 10)
	var eps []scheduler.Endpoint
	eventually(t, 5*time.Second, "vgg ready", func() bool {
		eps, _ = readyEndpoints(b, DefaultNamespace, "vgg")
		return len(eps) == 1
	})
	// The replica pays the profiled load before it is ready, as the
	// template does, so no request pays it.
	if d := time.Since(deployed); d < p.LoadTime {
		t.Fatalf("ready %s after the deploy, want after the %s load", d, p.LoadTime)
	}
	call := func() (time.Duration, http.Header) {
		start := time.Now()
		resp, err := http.Post(eps[0].URL, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return time.Since(start), resp.Header
	}
	want := time.Duration(lat * float64(time.Millisecond))
	for _, which := range []string{"first", "second"} {
		d, h := call()
		if h.Get(headerCache) != "hit" || d < want || d >= p.LoadTime {
			t.Fatalf("%s call: %s cache %q, want a hit of at least the profiled %s, without the %s load", which, d, h.Get(headerCache), want, p.LoadTime)
		}
	}
}

// The proxy's one lookup per request.
var _ handlers.ReplicaResolver = (*Backend)(nil)

// TestBacklogFeedsTheAutoscaler: the backlog is what waits beyond the
// replicas' batch slots, plus what the proxy queues, and a backlog the
// rate does not show scales the function up.
func TestBacklogFeedsTheAutoscaler(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	if err := b.Deploy(ctx, modelSpec("rn", "resnet50", 50*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	fn, _ := coreView(b, key(DefaultNamespace, "rn"))
	b.mu.Lock()
	r := b.running[fn.Live[0].ID]
	b.mu.Unlock()
	batch := int64(max(r.config.Batch, 1))
	tests := []struct {
		name     string
		inFlight int64
		queued   int
		want     float64
	}{
		{"idle", 0, 0, 0},
		{"running a batch: nothing waits", batch, 0, 0},
		{"a batch and 3 waiting at the replica", batch + 3, 0, 3},
		{"queued in the proxy", 0, 5, 5},
		{"both", batch + 3, 5, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r.inFlight.Store(tt.inFlight)
			book := b.cfg.Load.(*handlers.LoadBook)
			book.SetQueued(DefaultNamespace, "rn", tt.queued)
			_, _, queued := book.Load(DefaultNamespace, "rn")
			b.mu.Lock()
			got := b.backlogLocked(fn, queued)
			b.mu.Unlock()
			if got != tt.want {
				t.Fatalf("backlog %v, want %v", got, tt.want)
			}
		})
	}

	// No request counted yet (rate 0), but 2,000 wait: 2000 / 5 s =
	// 400 req/s of demand, above one replica's capacity.
	r.inFlight.Store(batch + 1000)
	book := b.cfg.Load.(*handlers.LoadBook)
	book.SetQueued(DefaultNamespace, "rn", 1000)
	t.Cleanup(func() { r.inFlight.Store(0); book.SetQueued(DefaultNamespace, "rn", 0) })
	b.Tick(time.Now())
	fn, _ = coreView(b, fn.Key)
	n, reason := len(fn.Live), fn.LastScale
	if n < 2 || !strings.Contains(reason, "backlog 2000") {
		t.Fatalf("with 2,000 requests waiting: %d replicas (%q), want a scale-up for the backlog", n, reason)
	}
}

// TestReplicaResizedMakeBeforeBreak: after a load peak falls, the
// autoscaler's replicas are replaced by a cheaper one on emulated workers
// (scheduler.Resize), and at every tick the function has a replica ready
// in the proxy's routing: the replaced ones leave only once their
// replacement serves.
func TestReplicaResizedMakeBeforeBreak(t *testing.T) {
	b := newProfiledBackend(t)
	ctx := context.Background()
	spec := modelSpec("rn", "resnet50", 50*time.Millisecond)
	spec.Scale.Max = scheduler.DefaultMaxReplicas
	if err := b.Deploy(ctx, spec); err != nil {
		t.Fatal(err)
	}
	k := key(DefaultNamespace, "rn")
	// An emulated replica is ready once it has loaded its model (real
	// time, while the ticks are virtual): each step waits for the
	// replicas it started, as virtual seconds would.
	loaded := func(s int) {
		eventually(t, 10*time.Second, fmt.Sprintf("second %d: rn's replicas ready", s), func() bool {
			fn, _ := coreView(b, k)
			for _, r := range fn.Live {
				if r.Phase == lifecycle.Starting {
					return false
				}
			}
			return true
		})
	}
	loaded(-1)
	t0 := time.Now()
	b.Tick(t0)
	resized := 0
	routed := func(s int, when string) {
		if eps, err := readyEndpoints(b, DefaultNamespace, "rn"); err != nil || len(eps) == 0 {
			t.Fatalf("second %d, %s: no replica ready in routing (%v)", s, when, err)
		}
	}
	tick := func(s int, rate int) {
		// Spread over the virtual second, as the ticks count it.
		for i := range rate {
			requestAt(b, DefaultNamespace, "rn", t0.Add(time.Duration(s)*time.Second+time.Duration(i)*time.Second/time.Duration(rate)))
		}
		b.Tick(t0.Add(time.Duration(s+1) * time.Second))
		routed(s, "after the tick")
		loaded(s)
		routed(s, "once its replicas are ready")
		if fn, _ := coreView(b, k); strings.HasPrefix(fn.LastScale, "resize") || strings.HasPrefix(fn.LastScale, "merge") {
			resized++
		}
	}
	for s := range 60 {
		tick(s, 400)
	}
	peak, _ := coreView(b, k)
	for s := 60; s < 240; s++ {
		tick(s, 5)
	}
	end, _ := coreView(b, k)
	if resized == 0 {
		t.Fatalf("no resize after the load fell from 400 to 5 req/s (%d replicas at the peak, %d at the end: %+v)", len(peak.Live), len(end.Live), end.Live)
	}
	for _, pl := range b.core.Allocator().Usage() {
		if pl.SMAllocated > 100 || pl.MemoryAllocated > pl.Device.MemoryBytes {
			t.Fatalf("GPU oversubscribed: %+v", pl)
		}
	}
	t.Logf("%d replicas at the peak, %d at the end (%+v); last: %s", len(peak.Live), len(end.Live), end.Live[0].Config, end.LastScale)
}

// A replica's endpoint carries its slice's batch size and throughput, for
// the proxy's pull dispatch: the plan's, for a function with a profile.
func TestEndpointCarriesItsSlice(t *testing.T) {
	b := newProfiledBackend(t)
	spec := modelSpec("vgg", "vgg16", 0)
	spec.GPU.SMPercent = 10
	if err := b.Deploy(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	var eps []scheduler.Endpoint
	eventually(t, 5*time.Second, "vgg ready", func() bool {
		eps, _ = readyEndpoints(b, DefaultNamespace, "vgg")
		return len(eps) == 1
	})
	v, _ := coreView(b, key(DefaultNamespace, "vgg"))
	want := v.Plan.Base
	if want.Batch <= 0 || want.Throughput <= 0 {
		t.Fatalf("plan %+v: want a profiled slice", want)
	}
	if eps[0].Batch != want.Batch || eps[0].Throughput != want.Throughput {
		t.Fatalf("endpoint batch %d, %v req/s; want the slice's %d, %v", eps[0].Batch, eps[0].Throughput, want.Batch, want.Throughput)
	}
}

// TestBackendRiseScalesBetweenTicks: the backend's Rise pass reads what
// the proxy counted and adds replicas for a burst before the next Tick;
// at a steady rate it adds none.
func TestBackendRiseScalesBetweenTicks(t *testing.T) {
	tests := []struct {
		name  string
		next  int // requests in the 250 ms after 20 s at 120 req/s
		added bool
	}{
		{"steady", 30, false},
		{"a burst to 300 req/s", 75, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newProfiledBackend(t)
			spec := modelSpec("rn", "resnet50", 100*time.Millisecond)
			spec.Scale.Max = 20
			if err := b.Deploy(context.Background(), spec); err != nil {
				t.Fatal(err)
			}
			k := key(DefaultNamespace, "rn")
			t0 := time.Now()
			now := t0
			for s := 1; s <= 20; s++ {
				for range 120 {
					request(b, DefaultNamespace, "rn")
				}
				now = t0.Add(time.Duration(s) * time.Second)
				b.Tick(now)
			}
			before, _ := coreView(b, k)
			for range tt.next {
				request(b, DefaultNamespace, "rn")
			}
			b.Rise(now.Add(250 * time.Millisecond))
			after, _ := coreView(b, k)
			if got := len(after.Live) > len(before.Live); got != tt.added {
				t.Fatalf("%d replicas -> %d after %d requests in 250 ms (%q), want added %v", len(before.Live), len(after.Live), tt.next, after.LastScale, tt.added)
			}
		})
	}
}
