package sim

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// One replica, one model, requests evenly spaced at a rate it sustains:
// no request waits, so each takes exactly the profiled latency, and the
// GPU computes rate x latency of the time.
func TestOneReplicaAtAKnownRate(t *testing.T) {
	const (
		rate    = 50.0 // req/s: one every 20 ms
		service = 10.0 // ms
	)
	cat := synthCatalog(t, m("m10", service))
	wl, err := Generator{Functions: []Function{{Name: "f", Model: "m10"}}, Shape: Constant(rate), Duration: 10 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	res, done, e := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{})
	n := int(rate * 10)
	if res.Completed != n || len(done) != n || res.Unfinished != 0 {
		t.Fatalf("completed %d (%d seen), unfinished %d, want %d", res.Completed, len(done), res.Unfinished, n)
	}
	for _, c := range done {
		if !near(c.latency, msDur(service)) {
			t.Fatalf("request %d took %s, want %v ms", c.n, c.latency, service)
		}
	}
	// No SLO: the smallest slice within 10 % of the whole GPU, 5 % here.
	sm := e.pol.(*faasGPU).fns[0].live[0].sm
	want := map[string][2]float64{
		"mean ms":      {res.Mean, service},
		"p99 ms":       {res.P99, service},
		"throughput":   {res.Throughput, rate},
		"util %":       {res.Util, 100 * rate * service / 1000},
		"GPU-seconds":  {res.GPUSeconds, 10},
		"GPUs mean":    {res.GPUsMean, 1},
		"SM alloc %":   {res.SMAllocated, float64(sm)},
		"hit %":        {res.HitRatio, 100},
		"cold loads":   {float64(res.ColdLoads), 0},
		"SLO viol %":   {res.SLOViolations, -1},
		"span seconds": {res.Span.Seconds(), 10},
	}
	for name, v := range want {
		if math.Abs(v[0]-v[1]) > 1e-3 {
			t.Errorf("%s = %v, want %v", name, v[0], v[1])
		}
	}
	if sm != 5 {
		t.Errorf("slice %d%% SM, want 5%% (flat latency: the smallest measured)", sm)
	}
}

// A GPU worker that starts empty pays the model load on its first
// request; the requests that arrive meanwhile queue and drain one by one.
// The expected latencies come from the queue's recursion: a request
// starts when it arrives or when the one before it ends, whichever is
// later.
func TestQueueBehindAColdLoad(t *testing.T) {
	const service = 10 * time.Millisecond
	load := time.Second
	cat := synthCatalog(t, m("m10", 10))
	wl, err := Generator{Functions: []Function{{Name: "f", Model: "m10"}}, Shape: Constant(50), Duration: 5 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	res, done, _ := simulate(t, "lb", wl, cluster(t, 1, 1), cat, Options{})
	var end time.Duration
	want := map[int32]time.Duration{}
	for i, a := range wl.Arrivals {
		start := max(a.At, end)
		if i == 0 {
			start += load
		}
		end = start + service
		want[int32(i)] = end - a.At
	}
	for _, c := range done {
		if !near(c.latency, want[c.n]) {
			t.Fatalf("request %d took %s, want %s", c.n, c.latency, want[c.n])
		}
	}
	if res.ColdLoads != 1 || res.Completed != len(wl.Arrivals) {
		t.Errorf("cold loads %d, completed %d; want 1, %d", res.ColdLoads, res.Completed, len(wl.Arrivals))
	}
	busy := float64(len(wl.Arrivals)) * service.Seconds()
	if got, want := res.Util, 100*busy/res.Span.Seconds(); math.Abs(got-want) > 1e-6 {
		t.Errorf("util %v %%, want %v %% (compute only, not the load)", got, want)
	}
}

func TestSimultaneousRequestsWaitTheirTurn(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	wl := trace(t, "0,f,m10\n0,f,m10\n0,f,m10\n", TraceOptions{})
	_, done, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{})
	for i, c := range done {
		if want := msDur(10 * float64(i+1)); !near(c.latency, want) {
			t.Errorf("completion %d took %s, want %s", i, c.latency, want)
		}
	}
}

// A replica with a batch size serves what waits for it as one batch, in
// the latency of the smallest measured batch that holds them. It does not
// wait for a batch to fill: of requests arriving together the first finds
// the replica idle and runs alone, the rest wait for it and go together.
func TestBatches(t *testing.T) {
	model := synthModel{name: "mb", lat: map[int]float64{1: 10, 2: 12, 4: 16, 8: 24}, memory: 1536 << 20, size: 128 << 20, load: time.Second}
	cat := synthCatalog(t, model)
	tests := []struct {
		requests int
		want     []float64 // latencies in completion order
	}{
		{1, []float64{10}},
		{3, []float64{10, 10 + 12, 10 + 12}},                    // 1, then 2
		{4, []float64{10, 10 + 16, 10 + 16, 10 + 16}},           // 1, then 3 in a batch of 4
		{10, []float64{10, 34, 34, 34, 34, 34, 34, 34, 34, 44}}, // 1, 8, 1
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.requests), func(t *testing.T) {
			// SLO 60 ms: batch 8 at 5 % SM (24 ms) carries the most
			// within the SLO at p99 (scheduler.QueueCapacity: about 200
			// req/s, batch 4 about 185) at the least cost.
			wl := trace(t, strings.Repeat("0,f,mb\n", tt.requests), TraceOptions{SLO: 60 * time.Millisecond})
			_, done, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{})
			if len(done) != len(tt.want) {
				t.Fatalf("%d completions, want %d", len(done), len(tt.want))
			}
			for i, c := range done {
				if !near(c.latency, msDur(tt.want[i])) {
					t.Errorf("completion %d took %s, want %v ms", i, c.latency, tt.want[i])
				}
			}
		})
	}
}

// -slo-margin M gives faas-gpu SLO x M to plan with, and its slice is
// the queueing model's choice at that SLO, while violations still count
// against the SLO as annotated. (The batches the model picks at 15, 30
// and 60 ms: batch 1, 4 and 8; the lone-replica model that times partial
// batches, docs/scheduling.md, took 30 ms from batch 2 to batch 4.)
func TestSLOMarginSetsTheBatchBound(t *testing.T) {
	model := synthModel{name: "mb", lat: map[int]float64{1: 10, 2: 12, 4: 16, 8: 24}, memory: 1536 << 20, size: 128 << 20, load: time.Second}
	cat := synthCatalog(t, model)
	tests := []struct {
		margin float64
		want   []float64 // latencies in completion order, 10 requests at 0
	}{
		// planned at 15 ms: batch 1 (10 ms)
		{0.5, []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}},
		// at 30 ms: batch 4 (16 ms)
		{1, []float64{10, 26, 26, 26, 26, 42, 42, 42, 42, 52}},
		// at 60 ms: batch 8 (24 ms)
		{2, []float64{10, 34, 34, 34, 34, 34, 34, 34, 34, 44}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.margin), func(t *testing.T) {
			wl := trace(t, strings.Repeat("0,f,mb\n", 10), TraceOptions{SLO: 30 * time.Millisecond})
			res, done, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{SLOMargin: tt.margin})
			if len(done) != len(tt.want) {
				t.Fatalf("%d completions, want %d", len(done), len(tt.want))
			}
			over := 0
			for i, c := range done {
				if !near(c.latency, msDur(tt.want[i])) {
					t.Errorf("completion %d took %s, want %v ms", i, c.latency, tt.want[i])
				}
				if c.latency > 30*time.Millisecond {
					over++
				}
			}
			if want := 100 * float64(over) / float64(len(done)); math.Abs(res.SLOViolations-want) > 1e-9 {
				t.Errorf("SLO violations %.2f %%, want %.2f %% (against the annotated 30 ms)", res.SLOViolations, want)
			}
		})
	}
}

// Loads: cold from storage, 40 % of that when the node loaded the model
// recently, nothing when the GPU holds it.
func TestLoadCosts(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	wl := trace(t, "0,f,m10\n5,f,m10\n10,f,m10\n", TraceOptions{})
	// lb sends them round robin: GPU 0, GPU 1 (same node), GPU 0.
	res, done, _ := simulate(t, "lb", wl, cluster(t, 2, 2), cat, Options{})
	want := []time.Duration{time.Second + msDur(10), 400*time.Millisecond + msDur(10), msDur(10)}
	for i, c := range done {
		if !near(c.latency, want[i]) {
			t.Errorf("request %d took %s, want %s", i, c.latency, want[i])
		}
	}
	if res.ColdLoads != 1 || res.NodeLoads != 1 || math.Abs(res.HitRatio-100.0/3) > 1e-9 {
		t.Errorf("cold %d, node %d, hit %.2f %%; want 1, 1, 33.33 %%", res.ColdLoads, res.NodeLoads, res.HitRatio)
	}
}

// A replica placed during the run (not deployed before it) serves only
// after its container starts and its model loads.
func TestColdStart(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	wl := trace(t, "0,f,m10\n", TraceOptions{})
	e, err := newEngine("lb", wl, cluster(t, 1, 1), cat, Options{ContainerStart: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := e.newReplica(0, 0)
	e.launch(r, e.gpus[0], 1<<30, false, false)
	if r.state != repStarting {
		t.Fatalf("state %v, want starting", r.state)
	}
	ev := e.q.pop()
	if ev.kind != evReady || ev.at != 3*time.Second {
		t.Errorf("ready at %s (kind %d), want 3s: 2 s container start + 1 s cold load", ev.at, ev.kind)
	}
}

func TestDrainLeavesUnfinishedRequests(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	// 1,000 requests at once, 10 ms each, only 1 s to drain.
	wl := trace(t, strings.Repeat("0,f,m10\n", 1000), TraceOptions{SLO: time.Hour})
	res, _, _ := simulate(t, "faas-gpu", wl, cluster(t, 1, 1), cat, Options{Drain: time.Second, Tick: time.Hour})
	if res.Completed+res.Unfinished != 1000 || res.Unfinished == 0 {
		t.Fatalf("completed %d, unfinished %d", res.Completed, res.Unfinished)
	}
	if want := 100 * float64(res.Unfinished) / 1000; math.Abs(res.SLOViolations-want) > 1e-9 {
		t.Errorf("SLO violations %v %%, want the unfinished %v %%", res.SLOViolations, want)
	}
}

// The series counts SLO requests by the interval they arrived in, and the
// misses among them (over the SLO or unfinished), so that the misses of a
// run can be traced to the load that caused them.
func TestSeriesCountsMissesByArrival(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	// A request every 100 ms for 6 s, and 200 at once at 2 s: most of those
	// miss, and finish in the intervals after the one they arrived in.
	var burst strings.Builder
	for i := range 60 {
		fmt.Fprintf(&burst, "%.1f,f,m10\n", float64(i)/10)
		if i == 20 {
			burst.WriteString(strings.Repeat("2,f,m10\n", 200))
		}
	}
	tests := []struct {
		name string
		wl   *Workload
		opts Options
	}{
		{"burst", trace(t, burst.String(), TraceOptions{SLO: 50 * time.Millisecond}),
			Options{SampleEvery: time.Second}},
		{"unfinished", trace(t, strings.Repeat("0,f,m10\n", 300)+"1,f,m10\n", TraceOptions{SLO: time.Hour}),
			Options{SampleEvery: time.Second, Drain: time.Second, Tick: time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, done, _ := simulate(t, "faas-gpu", tt.wl, cluster(t, 1, 1), cat, tt.opts)
			slo := tt.wl.Functions[0].SLO
			arrived, met := map[time.Duration]int{}, map[time.Duration]int{}
			for _, a := range tt.wl.Arrivals {
				arrived[a.At.Truncate(time.Second)]++
			}
			for _, c := range done {
				if c.latency <= slo {
					met[tt.wl.Arrivals[c.n].At.Truncate(time.Second)]++
				}
			}
			totalArrived, totalMissed := 0, 0
			for i, s := range res.Series {
				from := time.Duration(0)
				if i > 0 {
					from = res.Series[i-1].At
				}
				wantArrived, wantMissed := 0, 0
				for at, n := range arrived {
					if at >= from && (at < s.At || i == len(res.Series)-1) {
						wantArrived += n
						wantMissed += n - met[at]
					}
				}
				if s.SLOArrived != wantArrived || s.SLOMissed != wantMissed {
					t.Errorf("sample at %s: %d arrived, %d missed; want %d, %d", s.At, s.SLOArrived, s.SLOMissed, wantArrived, wantMissed)
				}
				totalArrived += s.SLOArrived
				totalMissed += s.SLOMissed
			}
			if totalMissed == 0 {
				t.Fatal("no request missed: the case tests nothing")
			}
			if got, want := 100*float64(totalMissed)/float64(totalArrived), res.SLOViolations; totalArrived != len(tt.wl.Arrivals) || math.Abs(got-want) > 1e-9 {
				t.Errorf("series: %d arrived, %.2f %% missed; run: %d requests, %.2f %%", totalArrived, got, len(tt.wl.Arrivals), want)
			}
			// Outside the second in which the burst arrived.
			outArrived, outMissed := 0, 0
			for at, n := range arrived {
				if at != 2*time.Second {
					outArrived += n
					outMissed += n - met[at]
				}
			}
			if got, want := res.SLOViolationsOutside(2*time.Second, 3*time.Second), 100*float64(outMissed)/float64(outArrived); math.Abs(got-want) > 1e-9 {
				t.Errorf("violations outside [2s, 3s): %.2f %%, want %.2f %%", got, want)
			}
		})
	}
}
