package parity

import (
	"context"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/faas-gpu/faas-gpu/sim"
	"go.uber.org/zap/zaptest"
)

// TestLocalAndSimulator: the local backend with emulated workers and the
// simulator decide the same, step by step. (The Kubernetes backend plays
// the same scenario in test/k8s.)
func TestLocalAndSimulator(t *testing.T) {
	cat, err := sim.BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Second)
	Play(t, t0, []string{"local", "sim"}, map[string]Runner{
		"local": newLocal(t, cat),
		"sim":   NewSimRunner(t, cat, sim.Options{}, t0),
	}, true)
}

// localRunner is the local backend with emulated workers, its clock the
// scenario's, its load counted in the proxy's LoadBook.
type localRunner struct {
	b    *local.Backend
	book *handlers.LoadBook
}

func newLocal(t *testing.T, cat *sim.Catalog) *localRunner {
	book := handlers.NewLoadBook()
	b, err := local.New(local.Config{StateDir: t.TempDir(), Inventory: Cluster("node-a", "node-b"), Profiles: instantLoads(t, cat.Store),
		Load: book, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return &localRunner{b: b, book: book}
}

// instantLoads is store with no model load time: an emulated worker
// loads its model before it is ready, in real time, while the scenario's
// steps are instant; with no load it is ready at once, as the simulator's
// replicas are at the end of each step. Decisions do not read the load
// time of a one-model function.
func instantLoads(t *testing.T, store *profiles.Store) *profiles.Store {
	out := profiles.NewStore()
	for _, m := range store.Models() {
		for _, prod := range store.Products(m) {
			p, _, _ := store.Lookup(m, prod)
			cp := *p
			cp.LoadTime = 0
			if err := out.Add(cp); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

func (l *localRunner) Deploy(t testing.TB, f Fn, at time.Time) {
	if err := l.b.Deploy(context.Background(), f.Spec()); err != nil {
		t.Fatalf("local: deploy %s: %v", f.Name, err)
	}
}

func (l *localRunner) Count(name string, n int, at time.Time) {
	for range n {
		l.book.Request("openfaas-fn", name, at)
	}
}

func (l *localRunner) Tick(at time.Time)                            { l.b.Tick(at) }
func (l *localRunner) SetInventory(inv gpu.Inventory, at time.Time) { l.b.SetInventory(inv) }

func (l *localRunner) Remove(t testing.TB, name string, at time.Time) {
	if err := l.b.Delete(context.Background(), "openfaas-fn", name); err != nil {
		t.Fatalf("local: delete %s: %v", name, err)
	}
}

func (l *localRunner) Report(t testing.TB) scheduler.ClusterReport {
	rep, err := l.b.GPUReport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
