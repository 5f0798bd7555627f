package profiles

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
)

const smallTable = `model,batch,sm_percent,quota_percent,latency_ms
resnet50,1,5,100,22.497
resnet50,1,10,100,21.039
resnet50,4,10,100,33.458
resnet50,1,5,50,32.1
mymodel,1,50,100,3.5
`

func TestImportCSV(t *testing.T) {
	got, err := ImportCSV(strings.NewReader(smallTable), gpu.V100Product)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Model != "mymodel" || got[1].Model != "resnet50" {
		t.Fatalf("profiles = %+v, want mymodel then resnet50", got)
	}
	mine, r50 := got[0], got[1]
	if len(r50.Points) != 4 || r50.GPU != gpu.V100Product {
		t.Errorf("resnet50: %d points on %q", len(r50.Points), r50.GPU)
	}
	if lat, est, err := r50.SliceLatency(1, 7.5); err != nil || lat != (22.497+21.039)/2 || est != Interpolated {
		t.Errorf("resnet50 SliceLatency(1, 7.5) = %v %s %v", lat, est, err)
	}
	fp := EstimateFootprint(25557032)
	if r50.MemoryBytes != fp.MemoryBytes || r50.LoadTime != fp.LoadTime || !strings.Contains(r50.Source, "num_params 25557032") {
		t.Errorf("resnet50 footprint: memory %d loadTime %s source %q", r50.MemoryBytes, r50.LoadTime, r50.Source)
	}
	if mine.MemoryBytes != 0 || mine.LoadTime != 0 || strings.Contains(mine.Source, "num_params") {
		t.Errorf("a model with no known parameter count got a footprint: %+v", mine)
	}
}

func TestImportCSVColumnOrder(t *testing.T) {
	table := "latency_ms,model,quota_percent,sm_percent,batch\n12.5,m,100,20,2\n"
	got, err := ImportCSV(strings.NewReader(table), "g")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Point{Batch: 2, SM: 20, Quota: 100, Latency: 12.5}); len(got) != 1 || got[0].Points[0] != want {
		t.Errorf("got %+v, want one point %v", got, want)
	}
}

func TestImportCSVErrors(t *testing.T) {
	const header = "model,batch,sm_percent,quota_percent,latency_ms\n"
	tests := []struct {
		name, product, table, wantErr string
	}{
		{"no product", "", header + "m,1,5,100,1\n", "gpu product"},
		{"empty input", "g", "", "line 1: empty table"},
		{"header only", "g", header, "no rows"},
		{"missing column", "g", "model,batch,sm_percent,quota,latency_ms\n", `line 1: no column "quota_percent"`},
		{"extra column", "g", "model,batch,sm_percent,quota_percent,latency_ms,gpu\n", "line 1: 6 columns"},
		{"short row", "g", header + "m,1,5,100,1\nm,1,10,100\n", "line 3"},
		{"bad batch", "g", header + "m,one,5,100,1\n", `line 2: batch: "one" is not an integer`},
		{"batch zero", "g", header + "m,1,5,100,1\nm,0,5,100,1\n", "line 3: batch: 0 must be at least 1"},
		{"sm zero", "g", header + "m,1,0,100,1\n", "line 2: sm_percent: 0 is outside 1-100"},
		{"sm 120", "g", header + "m,1,120,100,1\n", "line 2: sm_percent: 120 is outside 1-100"},
		{"fractional sm", "g", header + "m,1,5.5,100,1\n", `line 2: sm_percent: "5.5" is not an integer`},
		{"quota above 100", "g", header + "m,1,5,110,1\n", "line 2: quota_percent: 110 is outside 1-100"},
		{"latency zero", "g", header + "m,1,5,100,0\n", `line 2: latency_ms: "0" is not a positive`},
		{"latency text", "g", header + "m,1,5,100,fast\n", `line 2: latency_ms: "fast"`},
		{"latency NaN", "g", header + "m,1,5,100,NaN\n", `line 2: latency_ms: "NaN"`},
		{"bad model", "g", header + "a b,1,5,100,1\n", `line 2: model: "a b"`},
		{"repeated row", "g", header + "m,1,5,100,1\nm,1,10,100,1\nm,1,5,100,2\n", "line 4: m batch 1 sm 5 quota 100 repeats line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ImportCSV(strings.NewReader(tt.table), tt.product)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestImportCSVToDir(t *testing.T) {
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "measured.csv")
	if err := os.WriteFile(csvPath, []byte(smallTable), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "profiles", "v100")
	n, err := ImportCSVToDir(csvPath, gpu.V100Product, out)
	if err != nil || n != 2 {
		t.Fatalf("ImportCSVToDir = %d, %v", n, err)
	}
	for _, name := range []string{"resnet50.yaml", "mymodel.yaml"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
	s := NewStore()
	if n, err := s.LoadDir(out); err != nil || n != 2 {
		t.Fatalf("LoadDir = %d, %v", n, err)
	}
	p, _, _ := s.Lookup("resnet50", gpu.V100Product)
	if !strings.HasPrefix(p.Source, "imported from measured.csv: ") || len(p.Points) != 4 {
		t.Errorf("read back %q with %d points", p.Source, len(p.Points))
	}

	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte(smallTable+"m,1,0,100,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "untouched")
	if _, err := ImportCSVToDir(bad, gpu.V100Product, empty); err == nil || !strings.Contains(err.Error(), "bad.csv: line 7") {
		t.Errorf("err = %v, want bad.csv: line 7", err)
	}
	if _, err := os.Stat(empty); !errors.Is(err, os.ErrNotExist) {
		t.Error("a failed import created its output directory")
	}
	if _, err := ImportCSVToDir(filepath.Join(dir, "nope.csv"), gpu.V100Product, out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing csv: err = %v", err)
	}
}

func TestImportRaPPTable(t *testing.T) {
	got, err := ImportCSV(openTable(t), gpu.V100Product)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 69 {
		t.Fatalf("%d models, want 69", len(got))
	}
	total := 0
	for _, p := range got {
		total += len(p.Points)
		want := 800 // 20 SM × 10 quotas × 4 batches
		switch p.Model {
		case "efficientnet_b7":
			want = 728 // sm 5 and 10 measured at quota 100 only
		case "regnet_y_128gf":
			want = 600 // no batch 8
		}
		if len(p.Points) != want {
			t.Errorf("%s: %d points, want %d", p.Model, len(p.Points), want)
		}
		if p.MemoryBytes == 0 {
			t.Errorf("%s: no memory estimate", p.Model)
		}
	}
	if total != 54928 {
		t.Errorf("%d points, want the table's 54,928 rows", total)
	}
}
