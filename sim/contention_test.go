package sim

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
)

// pinned places one replica per function where a test says, at the SM
// share it says, and keeps each busy with its own function's queue: a
// closed loop, for measuring what co-location does to a replica's speed.
type pinned struct {
	at   []pin
	reps []*replica
}

type pin struct {
	gpu, sm int
	quota   int
}

func (p *pinned) start(e *Engine) error {
	for i, at := range p.at {
		r := e.newReplica(i, e.fnModel[i])
		r.quota = at.quota
		r.sm, r.share, r.mem = at.sm, min(at.sm, 100)*r.quota, 1<<30
		e.launch(r, e.gpus[at.gpu], 1<<30, true, false)
		p.reps = append(p.reps, r)
	}
	return nil
}

func (p *pinned) arrive(e *Engine, n int32) {
	r := p.reps[e.wl.Arrivals[n].Fn]
	r.queue.push(n)
	e.serveQueue(r)
}
func (p *pinned) ready(e *Engine, r *replica) { e.serveQueue(r) }
func (p *pinned) idle(e *Engine, r *replica)  { e.serveQueue(r) }
func (p *pinned) tick(*Engine)                {}
func (p *pinned) compute(e *Engine, r *replica, m int, _ int) time.Duration {
	return quotaLatency(e.models[m].prof, r.sm, r.quota)
}

// scaling is a profile whose batch-1 latency is host + gpu x 100 / sm ms
// at every 5 % SM: its split is exactly (host, gpu). At quota 50 a batch
// takes twice as long: it waits for its time slices half the time.
func scaling(t testing.TB, name string, host, gpuMs float64) profiles.Profile {
	t.Helper()
	p := profiles.Profile{Model: name, GPU: gpu.V100Product, MemoryBytes: 1536 << 20, ModelSizeBytes: 128 << 20, LoadTime: time.Second}
	for s := 5; s <= 100; s += 5 {
		lat := host + gpuMs*100/float64(s)
		p.Points = append(p.Points, profiles.Point{Batch: 1, SM: s, Quota: 100, Latency: lat},
			profiles.Point{Batch: 1, SM: s, Quota: 50, Latency: 2 * lat})
	}
	return p
}

func catalogOf(t testing.TB, ps ...profiles.Profile) *Catalog {
	t.Helper()
	s := profiles.NewStore()
	for _, p := range ps {
		if err := s.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return &Catalog{Store: s, Source: "test"}
}

// closedLoop runs the pinned replicas of model (one function each, all
// requests queued at time 0, more than they serve in the run) and returns
// each function's completions per second over [1 s, 6 s): long enough
// that replicas finishing in lockstep do not quantise the rate.
func closedLoop(t testing.TB, cat *Catalog, inv gpu.Inventory, c *Contention, model string, at []pin) []float64 {
	t.Helper()
	var b strings.Builder
	for i := range at {
		for range 800 { // more than 6 s at the fastest rate tested
			fmt.Fprintf(&b, "0,f%d,%s\n", i, model)
		}
	}
	wl := trace(t, b.String(), TraceOptions{Duration: 6 * time.Second})
	e, err := newEngine("pinned", wl, inv, cat, Options{Contention: c, Drain: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.pol = &pinned{at: at}
	done := make([]int, len(at))
	e.onDone = func(n int32, _ *replica, when time.Duration) {
		if when >= time.Second && when < 6*time.Second {
			done[wl.Arrivals[n].Fn]++
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(done))
	for i, d := range done {
		out[i] = float64(d) / 5
	}
	return out
}

func TestContentionRates(t *testing.T) {
	allGPU := scaling(t, "gpuonly", 0, 10) // 10 ms on the whole GPU, 20 ms at 50 %
	allHost := scaling(t, "hostonly", 10, 0)
	mixed := scaling(t, "mixed", 5, 5) // 10 ms whole, 15 ms at 50 %: a third GPU
	cat := catalogOf(t, allGPU, allHost, mixed)
	off := &Contention{}
	pen := func(p float64) *Contention { return &Contention{Default: p} }
	tests := []struct {
		name  string
		model string
		c     *Contention
		at    []pin
		cores int
		want  []float64 // req/s each
	}{
		{"two 50 % replicas fully busy run at their 50 % speed", "gpuonly", off, []pin{{0, 50, 100}, {0, 50, 100}}, 0, []float64{50, 50}},
		{"one alone on its 50 %", "gpuonly", off, []pin{{0, 50, 100}}, 0, []float64{50}},
		// 3 x 50 % = 150 % of the GPU wanted: each gets 1/1.5 of its speed.
		{"demand above capacity slows in proportion", "gpuonly", off, []pin{{0, 50, 100}, {0, 50, 100}, {0, 50, 100}}, 0, []float64{100.0 / 3, 100.0 / 3, 100.0 / 3}},
		{"racing whole-GPU pods take turns", "gpuonly", off, []pin{{0, 100, 100}, {0, 100, 100}}, 0, []float64{50, 50}},
		// Host parts overlap: only the GPU thirds (at 100 %) compete.
		// Two at 100 %: load 2 x 1/3 < 1, no stretch.
		{"host parts do not take turns", "mixed", off, []pin{{0, 100, 100}, {0, 100, 100}}, 0, []float64{100, 100}},
		// Four at 100 %: f = 0.5, load 4 x 0.5/(0.5 + 0.5 s) = 1 at s = 3:
		// 10 ms x (0.5 + 1.5) = 20 ms.
		{"GPU parts above capacity stretch", "mixed", off, []pin{{0, 100, 100}, {0, 100, 100}, {0, 100, 100}, {0, 100, 100}}, 0, []float64{50, 50, 50, 50}},
		{"different GPUs do not touch", "gpuonly", pen(1), []pin{{0, 50, 100}, {1, 50, 100}}, 0, []float64{50, 50}},
		// Neighbour of share 0.5 busy: 20 ms x (1 + 0.4 x 0.5) = 24 ms.
		{"busy neighbour's interference", "gpuonly", pen(0.4), []pin{{0, 50, 100}, {0, 50, 100}}, 0, []float64{1000.0 / 24, 1000.0 / 24}},
		// Four host-bound replicas on two cores: each at half speed.
		{"more busy replicas than cores", "hostonly", off, []pin{{0, 50, 100}, {0, 50, 100}, {1, 50, 100}, {1, 50, 100}}, 2, []float64{50, 50, 50, 50}},
		{"as many as cores", "hostonly", off, []pin{{0, 50, 100}, {1, 50, 100}}, 2, []float64{100, 100}},
		// Regression: the wait for time slices counted as host work, so
		// two pods at quota 50 of a host-bound model wanted two cores.
		// They keep one core busy between them: no slowdown on one.
		{"waiting for time slices takes no core", "hostonly", off, []pin{{0, 50, 50}, {1, 50, 50}}, 1, []float64{50, 50}},
		// Four want two cores of one: host halves take twice as long,
		// 20 ms x (0.5 + 0.5 x 2) = 30 ms.
		{"below full quota the host part still counts", "hostonly", off, []pin{{0, 50, 50}, {0, 50, 50}, {1, 50, 50}, {1, 50, 50}}, 1, []float64{1000.0 / 30, 1000.0 / 30, 1000.0 / 30, 1000.0 / 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := cluster(t, 2, 2)
			if tt.cores > 0 {
				inv.Nodes[0].CPUCores = tt.cores
			}
			got := closedLoop(t, cat, inv, tt.c, tt.model, tt.at)
			for i := range tt.want {
				// Whole batches in a five-second window.
				if math.Abs(got[i]-tt.want[i]) > 0.5 {
					t.Errorf("replica %d: %.1f req/s, want %.1f (all: %v)", i, got[i], tt.want[i], got)
				}
			}
		})
	}
}

// An idle neighbour costs nothing: a replica with a busy neighbour
// serves less than alone, with an idle one as much as alone.
func TestContentionIdleNeighbourCostsNothing(t *testing.T) {
	cat := catalogOf(t, scaling(t, "gpuonly", 0, 10))
	c := &Contention{Default: 0.4}
	inv := cluster(t, 1, 1)
	// f1's replica gets no requests: idle beside f0.
	var b strings.Builder
	for range 5000 {
		b.WriteString("0,f0,gpuonly\n")
	}
	b.WriteString("2.9,f1,gpuonly\n")
	wl := trace(t, b.String(), TraceOptions{Duration: 3 * time.Second})
	e, err := newEngine("pinned", wl, inv, cat, Options{Contention: c, Drain: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.pol = &pinned{at: []pin{{0, 50, 100}, {0, 50, 100}}}
	n := 0
	e.onDone = func(_ int32, r *replica, when time.Duration) {
		if r.fn == 0 && when >= time.Second && when < 2*time.Second {
			n++
		}
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	if n != 50 {
		t.Errorf("beside an idle neighbour: %d req/s, want 50 (alone)", n)
	}
}

// A contention model with no penalty and cores enough reproduces the
// simulator without one exactly, for every policy whose slices never
// want more than their GPU (all but time sharing, whose pods now overlap
// their host parts): the same completions at the same nanoseconds.
func TestContentionZeroPenaltyReproducesNone(t *testing.T) {
	// Flat profiles (all host) with the quotas fast-gshare needs, and
	// profiles with both parts (a third to all GPU at 100 %), whose slices
	// fit their GPU: neither may move a completion by a nanosecond.
	flat := synthCatalog(t, m("a", 10), m("b", 25), m("c", 40))
	parts := catalogOf(t, scaling(t, "a", 5, 5), scaling(t, "b", 10, 15), scaling(t, "c", 0, 40))
	var b strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&b, "%.4f,f%d,%s\n", float64(i)*0.01, i%3, string(rune('a'+i%3)))
	}
	wl := trace(t, b.String(), TraceOptions{})
	for _, tt := range []struct {
		name     string
		cat      *Catalog
		policies []string
	}{
		{"all host", flat, []string{"fast-gshare", "lb", "lalb", "lalb-o3", "faas-gpu"}},
		{"host and GPU", parts, []string{"lb", "lalb", "lalb-o3", "faas-gpu"}},
	} {
		for _, policy := range tt.policies {
			t.Run(tt.name+"/"+policy, func(t *testing.T) {
				inv := cluster(t, 4, 2)
				for i := range inv.Nodes {
					inv.Nodes[i].CPUCores = 1000
				}
				before, doneBefore, _ := simulate(t, policy, wl, inv, tt.cat, Options{})
				after, doneAfter, _ := simulate(t, policy, wl, inv, tt.cat, Options{Contention: &Contention{}})
				if len(doneBefore) != len(doneAfter) {
					t.Fatalf("%d completions with a zero penalty, %d without", len(doneAfter), len(doneBefore))
				}
				for i := range doneBefore {
					if doneBefore[i] != doneAfter[i] {
						t.Fatalf("completion %d: %+v with a zero penalty, %+v without", i, doneAfter[i], doneBefore[i])
					}
				}
				// Wall time and the event count (completions planned
				// again) are the only differences.
				before.Wall, after.Wall, before.Events, after.Events = 0, 0, 0, 0
				if !reflect.DeepEqual(before, after) {
					t.Errorf("results differ: mean %v / %v ms, GPU-s %v / %v", after.Mean, before.Mean, after.GPUSeconds, before.GPUSeconds)
				}
			})
		}
	}
}

func TestParseContention(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		wantErr string
		def     float64
		pen     map[string]float64
	}{
		{name: "models and default", text: "# measured\nmodel,penalty\n*,0.1\nresnet50,0.3\n", def: 0.1, pen: map[string]float64{"resnet50": 0.3}},
		{name: "default built in", text: "model,penalty\nvgg16,0\n", def: DefaultPenalty, pen: map[string]float64{"vgg16": 0}},
		{name: "empty", text: "# nothing\n", wantErr: "empty"},
		{name: "wrong header", text: "model,slowdown\n", wantErr: ":1: header"},
		{name: "negative", text: "model,penalty\nresnet50,-1\n", wantErr: ":2: penalty"},
		{name: "not a number", text: "model,penalty\nresnet50,lots\n", wantErr: ":2: penalty"},
		{name: "no value", text: "model,penalty\nresnet50\n", wantErr: ":2: want model,penalty"},
		{name: "bad model", text: "model,penalty\n../x,1\n", wantErr: "not a profile name"},
		{name: "twice", text: "model,penalty\na,1\na,2\n", wantErr: ":3: model \"a\" listed twice"},
		{name: "default twice", text: "model,penalty\n*,1\n*,2\n", wantErr: "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseContention(strings.NewReader(tt.text), "f.csv")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Default != tt.def || !reflect.DeepEqual(c.Penalties, tt.pen) {
				t.Errorf("got default %v penalties %v, want %v %v", c.Default, c.Penalties, tt.def, tt.pen)
			}
			if got := c.Penalty("unlisted"); got != tt.def {
				t.Errorf("Penalty(unlisted) = %v, want the default %v", got, tt.def)
			}
		})
	}
}
