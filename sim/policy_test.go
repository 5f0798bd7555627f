package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// LALB sends a request to the free GPU that holds its model; LB sends it
// to the next GPU in turn, which here does not hold it.
func TestLocalityVersusLoadBalancing(t *testing.T) {
	cat := synthCatalog(t, m("ma", 10), m("mb", 10))
	wl := trace(t, "0,zoo,ma\n5,zoo,mb\n10,zoo,mb\n", TraceOptions{})
	tests := []struct {
		policy string
		gpus   []int // where each request ran
		hit    float64
	}{
		{"lb", []int{0, 1, 0}, 0},
		{"lalb", []int{0, 1, 1}, 100.0 / 3},
		{"lalb-o3", []int{0, 1, 1}, 100.0 / 3},
	}
	for _, tt := range tests {
		t.Run(tt.policy, func(t *testing.T) {
			// GPUs on separate nodes: no node-tier loads to muddle it.
			res, done, _ := simulate(t, tt.policy, wl, cluster(t, 2, 1), cat, Options{})
			var got []int
			for _, c := range done {
				got = append(got, c.gpu)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.gpus) {
				t.Errorf("requests ran on GPUs %v, want %v", got, tt.gpus)
			}
			if diff := res.HitRatio - tt.hit; diff > 1e-9 || diff < -1e-9 {
				t.Errorf("hit ratio %.2f %%, want %.2f %%", res.HitRatio, tt.hit)
			}
		})
	}
}

// With one GPU busy loading ma, a request for mx (held nowhere) and then
// one for ma wait. In order, mx goes first and loads; out of order the
// GPU takes the later ma request it holds first.
func TestOutOfOrderServesAHeldModelFirst(t *testing.T) {
	cat := synthCatalog(t, m("ma", 10), m("mx", 10))
	wl := trace(t, "0,zoo,ma\n0.1,zoo,mx\n0.2,zoo,ma\n", TraceOptions{})
	for policy, order := range map[string]string{"lalb": "0 1 2", "lalb-o3": "0 2 1", "lb": "0 1 2"} {
		_, done, _ := simulate(t, policy, wl, cluster(t, 1, 1), cat, Options{})
		var got []string
		for _, c := range done {
			got = append(got, fmt.Sprint(c.n))
		}
		if strings.Join(got, " ") != order {
			t.Errorf("%s completed requests %v, want %s", policy, got, order)
		}
	}
}

// Time sharing gives every pod the whole GPU: two pods there never run at
// the same time, so two requests that arrive together each take longer
// than alone (10 and 20 ms of work end at 20 and 30 ms); on two GPUs
// they do not (the baseline spreads pods while GPUs are free).
func TestTimeSharingNeverRunsPodsConcurrently(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10), m("m20", 20))
	wl := trace(t, "0,a,m10\n0,b,m20\n", TraceOptions{})
	for gpus, want := range map[int][]float64{1: {20, 30}, 2: {10, 20}} {
		_, done, e := simulate(t, "time-sharing", wl, cluster(t, gpus, gpus), cat, Options{})
		for i, c := range done {
			if !near(c.latency, msDur(want[i])) {
				t.Errorf("%d GPUs: completion %d took %s, want %v ms", gpus, i, c.latency, want[i])
			}
		}
		for _, f := range e.pol.(*fastFamily).fns {
			for _, r := range f.live {
				if r.sm != 100 || r.share != fullShare {
					t.Errorf("pod %s has %d%% SM, share %d: time sharing gives whole GPUs", r.id, r.sm, r.share)
				}
			}
		}
	}
}

// FaST-GShare packs the slide-18 pods into one GPU's quota x SM square;
// time sharing spreads them over all four GPUs.
func TestFastGShareConsolidates(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	var fns []Function
	for i := range 8 {
		fns = append(fns, Function{Name: fmt.Sprintf("f%d", i), Model: "m10", SLO: 50 * time.Millisecond})
	}
	wl, err := Generator{Functions: fns, Shape: Constant(16), Duration: 30 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"fast-gshare": 1, "time-sharing": 4}
	for policy, gpus := range want {
		res, _, e := simulate(t, policy, wl, cluster(t, 4, 1), cat, Options{})
		if res.GPUsMean != gpus {
			t.Errorf("%s used %.2f GPUs, want %v", policy, res.GPUsMean, gpus)
		}
		if policy == "fast-gshare" {
			// Highest RPR meeting 50 ms: 5 % SM at quota 20 % (50 ms),
			// as efficient as the whole quota and smaller.
			r := e.pol.(*fastFamily).fns[0].live[0]
			if r.sm != 5 || r.quota != 20 {
				t.Errorf("pod at %d%% SM, quota %d%%; want 5%%, 20%%", r.sm, r.quota)
			}
			if res.Completed != len(wl.Arrivals) || res.P99 > 50 {
				t.Errorf("completed %d of %d, p99 %.1f ms", res.Completed, len(wl.Arrivals), res.P99)
			}
		}
	}
}

// FaST-GShare's autoscaler covers a rate with the most efficient pods and
// a tight one for the rest, and removes the least efficient first.
func TestFastGShareAutoscaler(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	ramp := Ramp{{0, 5}, {30 * time.Second, 5}, {31 * time.Second, 95}, {90 * time.Second, 95}, {91 * time.Second, 5}, {200 * time.Second, 5}}
	wl, err := Generator{Functions: []Function{{Name: "f", Model: "m10", SLO: 50 * time.Millisecond, Max: 50}}, Shape: ramp, Duration: 200 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEngine("fast-gshare", wl, cluster(t, 4, 4), cat, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &fastFamily{}
	e.pol = p
	peak := 0.0
	e.onDone = func(int32, *replica, time.Duration) {
		c := 0.0
		for _, r := range p.fns[0].live {
			c += r.tput
		}
		peak = max(peak, c)
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	f := p.fns[0]
	if peak < 95 {
		t.Errorf("peak capacity %.1f req/s, want at least the 95 req/s offered", peak)
	}
	if len(f.live) != 1 {
		t.Errorf("after the load fell to 5 req/s: %d pods, want the minimum, 1", len(f.live))
	}
}

// faas-gpu keeps a scaled-down replica warm and promotes it on the next
// rise: no second load.
func TestFaasGPUReusesWarmReplicas(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	// One 5 % replica serves 100 req/s at 10 ms; 300 req/s needs more.
	ramp := Ramp{{0, 300}, {60 * time.Second, 300}, {61 * time.Second, 10}, {150 * time.Second, 10}, {151 * time.Second, 300}, {200 * time.Second, 300}}
	wl, err := Generator{Functions: []Function{{Name: "f", Model: "m10", SLO: 50 * time.Millisecond}}, Shape: ramp, Poisson: true, Duration: 200 * time.Second, Seed: 3}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	res, _, e := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{})
	p := e.pol.(*faasGPU)
	if p.promoted == 0 {
		t.Fatalf("no warm replica promoted (placed %d)", p.placed)
	}
	// Loads only for replicas placed during the run; promoted ones load
	// nothing.
	if loads := res.ColdLoads + res.NodeLoads; loads != p.placed-1 {
		t.Errorf("%d loads for %d replicas placed after the first", loads, p.placed-1)
	}
}

func TestFastGShareNeedsQuotas(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	cat.Quotas = false
	wl := trace(t, "0,f,m10\n", TraceOptions{})
	_, err := RunPolicy(Config{Workload: wl, Inventory: cluster(t, 1, 1), Catalog: cat}, "fast-gshare")
	if err == nil || !strings.Contains(err.Error(), "profiles-csv") {
		t.Errorf("got %v, want an error naming --profiles-csv", err)
	}
}

// A step from 50 to 300 req/s on replicas serving about 100 req/s each:
// the rise is seen at the first tick after it (RateEstimator.Rising), and
// replicas are added for it; requests queue meanwhile, for the start-up.
// The backlog term adds what drains that queue within DrainTime, so once
// the added replicas are ready (a container start and the model load) and
// DrainTime has passed, requests meet the SLO again: the last one that
// misses arrived before then.
func TestFaasGPUScalesForTheBacklog(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10)) // 10 ms at every SM %: 100 req/s a replica
	step := 10 * time.Second
	var b strings.Builder
	for at := time.Duration(0); at < 60*time.Second; {
		fmt.Fprintf(&b, "%.4f,f,m10\n", at.Seconds())
		if at < step {
			at += time.Second / 50
		} else {
			at += time.Second / 300
		}
	}
	slo := 100 * time.Millisecond
	wl := trace(t, b.String(), TraceOptions{SLO: slo})
	lastMiss := func(name string, opts Options) time.Duration {
		res, done, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, opts)
		var last time.Duration
		for _, d := range done {
			if at := wl.Arrivals[d.n].At; d.latency > slo && at > last {
				last = at
			}
		}
		t.Logf("%s: %.2f %% SLO violations, the last miss arrived at %s", name, res.SLOViolations, last)
		return last
	}
	// The added replicas are ready a tick, a container start and the
	// model load after the step; the backlog is to be gone DrainTime later.
	deadline := step + time.Second + 2*time.Second + time.Second + scheduler.DefaultDrainTime
	if last := lastMiss("as shipped", Options{}); last > deadline {
		t.Errorf("a request arriving at %s missed the SLO: the backlog was not drained by %s", last, deadline)
	}
	// For the record: with the rise seen at once, the rate alone drains
	// this queue nearly as soon; the queue stays at the replica it was
	// pushed to, which drains it at its own speed (pull dispatch is
	// another change).
	lastMiss("without the backlog", Options{NoBacklog: true})
}

// Load that falls leaves replicas sized for the peak: they are replaced by
// smaller ones, make-before-break, so none of the requests is lost and
// the SLO holds through the replacements.
func TestFaasGPUResizesAfterTheLoadFalls(t *testing.T) {
	// A model that speeds up with SM %: 40 ms at 5 % down to 2 ms at 100 %.
	sm := synthModel{name: "mx", lat: map[int]float64{1: 0}, memory: 512 << 20, size: 128 << 20, load: time.Second}
	cat := synthCatalog(t)
	p := profiles.Profile{Model: sm.name, GPU: gpu.V100Product, MemoryBytes: sm.memory, ModelSizeBytes: sm.size, LoadTime: sm.load}
	for s := 5; s <= 100; s += 5 {
		p.Points = append(p.Points, profiles.Point{Batch: 1, SM: s, Quota: 100, Latency: 200 / float64(s)})
	}
	if err := cat.Store.Add(p); err != nil {
		t.Fatal(err)
	}
	ramp := Ramp{{0, 200}, {60 * time.Second, 200}, {61 * time.Second, 10}, {240 * time.Second, 10}}
	wl, err := Generator{Functions: []Function{{Name: "f", Model: "mx", SLO: 50 * time.Millisecond}}, Shape: ramp, Poisson: true, Duration: 240 * time.Second, Seed: 5}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		opts         Options
		wantReplaced bool
	}{
		{"as shipped", Options{Warmup: 20 * time.Second}, true},
		{"without queueing: no resizing", Options{Warmup: 20 * time.Second, Autoscale: func() scheduler.AutoscaleOptions {
			o := scheduler.DefaultAutoscaleOptions
			o.NoQueueing = true
			return o
		}()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _, e := simulate(t, "faas-gpu", wl, cluster(t, 4, 4), cat, tt.opts)
			replaced := e.pol.(*faasGPU).replaced
			if (replaced > 0) != tt.wantReplaced {
				t.Errorf("%d replicas replaced, want some: %v", replaced, tt.wantReplaced)
			}
			if res.Unfinished != 0 || res.Completed != res.Requests {
				t.Errorf("%d of %d requests completed, %d unfinished", res.Completed, res.Requests, res.Unfinished)
			}
			if tt.wantReplaced && res.SLOViolations > 1 {
				t.Errorf("%.2f %% SLO violations through the replacements", res.SLOViolations)
			}
			t.Logf("%d replaced; %.2f %% SLO violations; %.0f GPU-s", replaced, res.SLOViolations, res.GPUSeconds)
		})
	}
}

// A multi-model function is planned from the model its first request
// names (ma, fast), but nine in ten of its requests name a model ten
// times as slow (mb): faas-gpu holds the SLO only by planning from the
// mix its requests name (scheduler.MixConfigs), its replicas pulling up
// to their batch size (scheduler.Pull with the locality rules).
func TestFaasGPUPlansAMultiModelFunctionFromItsMix(t *testing.T) {
	fast, slow := m("ma", 2), m("mb", 20)
	fast.lat[8], slow.lat[8] = 8, 80
	cat := synthCatalog(t, fast, slow)
	var b strings.Builder
	i := 0
	for at := time.Duration(0); at < 60*time.Second; at += time.Second / 150 {
		model := "mb"
		if i%10 == 0 {
			model = "ma"
		}
		fmt.Fprintf(&b, "%.4f,zoo,%s\n", at.Seconds(), model)
		i++
	}
	slo := 250 * time.Millisecond
	wl := trace(t, b.String(), TraceOptions{SLO: slo})
	res, done, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 4), cat, Options{Warmup: 20 * time.Second})
	late, batched := 0, false
	type at struct {
		replica string
		at      time.Duration
	}
	seen := map[at]int{}
	for _, d := range done {
		if wl.Arrivals[d.n].At >= 20*time.Second && d.latency > slo {
			late++
		}
		if k := (at{d.replica, d.at}); seen[k]+1 > 1 {
			batched = true // completing together at one replica: one batch
		} else {
			seen[k]++
		}
	}
	t.Logf("%.2f %% SLO violations after the first 20 s, %d late", res.SLOViolations, late)
	if res.SLOViolations > 1 {
		t.Errorf("%.2f %% SLO violations after the first 20 s, want at most 1 %%", res.SLOViolations)
	}
	if !batched {
		t.Error("no two requests completed together: the multi-model replicas ran one request at a time")
	}
}

// Two functions offered far more than one GPU serves: slow, deployed
// first, takes the GPU as its autoscaler asks; quick serves ten times as
// much per SM %. In the overload the room goes to the slices that serve
// most per cost (scheduler.Yield), slow keeping one replica.
func TestFaasGPUGivesAnOverloadedGPUToTheEfficientSlices(t *testing.T) {
	cat := synthCatalog(t, m("mslow", 40), m("mquick", 4))
	wl, err := Generator{Functions: []Function{{Name: "slow", Model: "mslow", SLO: 400 * time.Millisecond}, {Name: "quick", Model: "mquick", SLO: 40 * time.Millisecond}},
		Shape: Constant(4000), Duration: 60 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	res, _, e := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{Drain: time.Second})
	p := e.pol.(*faasGPU)
	slow, quick := len(p.byFn["openfaas-fn/slow"].live), len(p.byFn["openfaas-fn/quick"].live)
	t.Logf("%.0f req/s served; replicas in service at the end: slow %d, quick %d", res.Throughput, slow, quick)
	if slow < 1 || quick <= 2*slow {
		t.Errorf("replicas in service: slow %d, quick %d; want slow kept at one or more and quick with over twice as many", slow, quick)
	}
}

// A burst that outgrows the replicas leaves a queue whose requests miss
// their SLO wherever they run; the requests after it still meet it when
// they are served first (scheduler.LateAfter, LateLast), not behind the
// burst: in arrival order each waited for the burst's queue to drain,
// until more replicas were ready (102 of the 390 after it missed). A
// multi-model function's queue, with its locality rules, is ordered so
// too (pullMulti; in arrival order 102 of its 390 missed).
func TestFaasGPUServesOnTimeRequestsBeforeLateOnes(t *testing.T) {
	// A model loaded in 20 ms, so that the X-Model replica's first load
	// of its second model, which no order saves, is not what is measured.
	quick := func(name string) synthModel {
		sm := m(name, 10)
		sm.load = 20 * time.Millisecond
		return sm
	}
	tests := []struct {
		name   string
		models []synthModel // 10 ms at every SM %: 100 req/s a replica; the requests name them in turn
	}{
		{"one model", []synthModel{m("m10", 10)}},
		{"two models, X-Model", []synthModel{quick("m10"), quick("n10")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cat := synthCatalog(t, tt.models...)
			var b strings.Builder
			n := 0
			model := func() string { n++; return tt.models[n%len(tt.models)].name }
			for range 1000 {
				fmt.Fprintf(&b, "0,f,%s\n", model()) // 10 s of one replica's work at once
			}
			after := 500 * time.Millisecond
			for at := after; at < 20*time.Second; at += time.Second / 20 {
				fmt.Fprintf(&b, "%.4f,f,%s\n", at.Seconds(), model())
			}
			slo := 100 * time.Millisecond
			// 2 GiB a replica: room for both models beside the process.
			wl := trace(t, b.String(), TraceOptions{SLO: slo, MemoryBytes: 2 << 30})
			if multi := len(tt.models) > 1; wl.Functions[0].MultiModel() != multi {
				t.Fatalf("multi-model %v, want %v", wl.Functions[0].MultiModel(), multi)
			}
			res, done, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{})
			if res.Unfinished > 0 {
				t.Fatalf("%d requests unfinished: late ones must still be served", res.Unfinished)
			}
			burstMissed, laterMissed, later := 0, 0, 0
			for _, d := range done {
				missed := d.latency > slo
				if wl.Arrivals[d.n].At < after {
					if missed {
						burstMissed++
					}
					continue
				}
				later++
				if missed {
					laterMissed++
				}
			}
			t.Logf("%.2f %% SLO violations: %d of the burst's 1000, %d of the %d after it", res.SLOViolations, burstMissed, laterMissed, later)
			if laterMissed > later/100 {
				t.Errorf("%d of the %d requests after the burst missed the SLO: they waited behind the burst's late ones", laterMissed, later)
			}
		})
	}
}
