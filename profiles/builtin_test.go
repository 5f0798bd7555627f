package profiles

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// raPPTable is the measured table, beside the repository as in CI.
var raPPTable = filepath.Join("..", "..", "shared", "data", "rapp-v100-latency.csv")

// builtinOnce parses the embedded profiles once per test binary: tests
// only read the Store.
var builtinOnce = sync.OnceValues(Builtin)

func builtinStore(t testing.TB) *Store {
	t.Helper()
	s, err := builtinOnce()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func openTable(t testing.TB) *os.File {
	t.Helper()
	f, err := os.Open(raPPTable)
	if os.IsNotExist(err) {
		t.Skipf("%s not found: the RaPP table lives beside the repository", raPPTable)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestBuiltin(t *testing.T) {
	s := builtinStore(t)
	models := s.Models()
	if len(models) != 69 || s.Len() != 69 {
		t.Fatalf("%d models, %d profiles, want 69 of each", len(models), s.Len())
	}
	var known []string
	for _, m := range TorchvisionModels() {
		known = append(known, m.Name)
	}
	if !slices.Equal(models, known) {
		t.Errorf("built-in models %v\ndiffer from TorchvisionModels %v", models, known)
	}
	for _, model := range models {
		p, fb, ok := s.Lookup(model, gpu.V100Product)
		if !ok || fb.Used() {
			t.Fatalf("%s: Lookup on the V100 = %v, fallback %v", model, ok, fb)
		}
		tv, _ := LookupTorchvision(model)
		fp := EstimateFootprint(tv.Params)
		if p.MemoryBytes != fp.MemoryBytes || p.ModelSizeBytes != fp.ModelSizeBytes || p.LoadTime != fp.LoadTime {
			t.Errorf("%s: memory %d modelSize %d loadTime %s, want the estimate %+v", model, p.MemoryBytes, p.ModelSizeBytes, p.LoadTime, fp)
		}
		if p.Source == "" {
			t.Errorf("%s: no source", model)
		}
		if got := p.Batches(FullQuota); len(got) == 0 || got[0] != 1 {
			t.Errorf("%s: batches at quota 100 = %v, want batch 1 first", model, got)
		}
		for _, pt := range p.Points {
			if pt.Quota != FullQuota {
				t.Fatalf("%s: point %v: built-in profiles keep quota 100 only", model, pt)
			}
		}
	}
}

// The built-in points are exactly the table's quota-100 rows.
func TestBuiltinMatchesTable(t *testing.T) {
	f := openTable(t)
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[Point]bool{}
	for _, r := range rows[1:] {
		if r[3] != "100" {
			continue
		}
		var pt Point
		pt.Batch, _ = strconv.Atoi(r[1])
		pt.SM, _ = strconv.Atoi(r[2])
		pt.Quota = 100
		pt.Latency, _ = strconv.ParseFloat(r[4], 64)
		if want[r[0]] == nil {
			want[r[0]] = map[Point]bool{}
		}
		want[r[0]][pt] = true
	}
	s := builtinStore(t)
	for model, pts := range want {
		p, _, ok := s.Lookup(model, gpu.V100Product)
		if !ok {
			t.Errorf("%s: no built-in profile", model)
			continue
		}
		if len(p.Points) != len(pts) {
			t.Errorf("%s: %d points, the table has %d at quota 100", model, len(p.Points), len(pts))
		}
		for _, pt := range p.Points {
			if !pts[pt] {
				t.Errorf("%s: point %v is not a row of the table", model, pt)
			}
		}
	}
}
