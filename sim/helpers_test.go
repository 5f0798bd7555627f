package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
)

// synthModel is a made-up profile with round numbers, so that a test can
// work out latencies by hand: the same latency at every SM %, per batch;
// at quota q < 100 (batch 1) latency x 100 / q.
type synthModel struct {
	name   string
	lat    map[int]float64 // batch -> ms
	memory int64
	size   int64
	load   time.Duration
}

func m(name string, ms float64) synthModel {
	return synthModel{name: name, lat: map[int]float64{1: ms}, memory: 1536 << 20, size: 128 << 20, load: time.Second}
}

func synthCatalog(t testing.TB, models ...synthModel) *Catalog {
	t.Helper()
	s := profiles.NewStore()
	for _, sm := range models {
		p := profiles.Profile{Model: sm.name, GPU: gpu.V100Product, MemoryBytes: sm.memory, ModelSizeBytes: sm.size, LoadTime: sm.load}
		for batch, lat := range sm.lat {
			for s := 5; s <= 100; s += 5 {
				p.Points = append(p.Points, profiles.Point{Batch: batch, SM: s, Quota: 100, Latency: lat})
				if batch == 1 {
					for q := 10; q < 100; q += 10 {
						p.Points = append(p.Points, profiles.Point{Batch: 1, SM: s, Quota: q, Latency: lat * 100 / float64(q)})
					}
				}
			}
		}
		if err := s.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	return &Catalog{Store: s, Quotas: true, Source: "test"}
}

func cluster(t testing.TB, n, perNode int) gpu.Inventory {
	t.Helper()
	inv, err := V100Inventory(n, perNode)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func trace(t testing.TB, text string, opts TraceOptions) *Workload {
	t.Helper()
	w, err := ReadTrace(strings.NewReader(TraceHeader+"\n"+text), opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// completion is one request as a test sees it finish.
type completion struct {
	n       int32
	replica string
	gpu     int
	at      time.Duration
	latency time.Duration
}

// simulate runs one policy and returns its result and every completion in
// the order they happened.
func simulate(t testing.TB, policy string, wl *Workload, inv gpu.Inventory, cat *Catalog, opts Options) (*Result, []completion, *Engine) {
	t.Helper()
	e, err := newEngine(policy, wl, inv, cat, opts)
	if err != nil {
		t.Fatal(err)
	}
	if e.pol, err = newPolicy(policy); err != nil {
		t.Fatal(err)
	}
	var done []completion
	e.onDone = func(n int32, r *replica, at time.Duration) {
		done = append(done, completion{n: n, replica: r.id, gpu: r.gpu.idx, at: at, latency: at - wl.Arrivals[n].At})
	}
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
	return e.met.result(e), done, e
}

func msDur(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// near reports whether two durations agree within rounding (profiles are
// read in float milliseconds).
func near(a, b time.Duration) bool {
	d := a - b
	return d > -time.Microsecond && d < time.Microsecond
}
