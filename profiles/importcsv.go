package profiles

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// csvColumns are the columns ImportCSV needs, in the order the RaPP table
// has them; other orders are accepted, other columns are not.
var csvColumns = [...]string{"model", "batch", "sm_percent", "quota_percent", "latency_ms"}

const (
	colModel = iota
	colBatch
	colSM
	colQuota
	colLatency
)

// ImportCSV converts a measured table with the header
// model,batch,sm_percent,quota_percent,latency_ms into one profile per
// model, measured on product and sorted by model. A malformed or repeated
// row is an error naming its line. Models known to TorchvisionModels get
// memory, modelSize and loadTime from EstimateFootprint; others leave
// them unknown.
func ImportCSV(r io.Reader, product string) ([]Profile, error) {
	product = strings.TrimSpace(product)
	if product == "" {
		return nil, errors.New("gpu product: must name the GPU the table was measured on")
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, errors.New("line 1: empty table, want header " + strings.Join(csvColumns[:], ","))
	}
	if err != nil {
		return nil, err
	}
	cols, err := columnOrder(header)
	if err != nil {
		return nil, fmt.Errorf("line 1: %w", err)
	}

	points := map[string][]Point{}
	firstLine := map[string]map[Point]int{} // latency zeroed: the key is (batch, sm, quota)
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err // *csv.ParseError names the line
		}
		line, _ := cr.FieldPos(0)
		model, pt, err := parseRow(rec, cols)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		key := pt
		key.Latency = 0
		if firstLine[model] == nil {
			firstLine[model] = map[Point]int{}
		}
		if prev, dup := firstLine[model][key]; dup {
			return nil, fmt.Errorf("line %d: %s batch %d sm %d quota %d repeats line %d", line, model, pt.Batch, pt.SM, pt.Quota, prev)
		}
		firstLine[model][key] = line
		points[model] = append(points[model], pt)
	}
	if len(points) == 0 {
		return nil, errors.New("no rows after the header")
	}

	out := make([]Profile, 0, len(points))
	for _, model := range slices.Sorted(maps.Keys(points)) {
		p := Profile{
			Model:  model,
			GPU:    product,
			Source: "measured table (" + strings.Join(csvColumns[:], ",") + ")",
			Points: points[model],
		}
		if tv, ok := LookupTorchvision(model); ok {
			fp := EstimateFootprint(tv.Params)
			p.MemoryBytes, p.ModelSizeBytes, p.LoadTime = fp.MemoryBytes, fp.ModelSizeBytes, fp.LoadTime
			p.Source += fmt.Sprintf("; memory, modelSize and loadTime estimated from torchvision num_params %d (docs/profiles.md)", tv.Params)
		}
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("%s: %w", model, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func columnOrder(header []string) ([len(csvColumns)]int, error) {
	var cols [len(csvColumns)]int
	want := "want header " + strings.Join(csvColumns[:], ",")
	if len(header) != len(csvColumns) {
		return cols, fmt.Errorf("%d columns, %s", len(header), want)
	}
	for i, name := range csvColumns {
		j := slices.Index(header, name)
		if j < 0 {
			return cols, fmt.Errorf("no column %q, %s", name, want)
		}
		cols[i] = j
	}
	return cols, nil
}

func parseRow(rec []string, cols [len(csvColumns)]int) (string, Point, error) {
	model := strings.TrimSpace(rec[cols[colModel]])
	if !modelName.MatchString(model) {
		return "", Point{}, fmt.Errorf("model: %q must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", model)
	}
	var pt Point
	ints := []struct {
		col    int
		lo, hi int
		dst    *int
	}{
		{colBatch, 1, math.MaxInt32, &pt.Batch},
		{colSM, 1, 100, &pt.SM},
		{colQuota, 1, 100, &pt.Quota},
	}
	for _, f := range ints {
		v := strings.TrimSpace(rec[cols[f.col]])
		n, err := strconv.Atoi(v)
		if err != nil {
			return "", Point{}, fmt.Errorf("%s: %q is not an integer", csvColumns[f.col], v)
		}
		if n < f.lo || n > f.hi {
			if f.hi == math.MaxInt32 {
				return "", Point{}, fmt.Errorf("%s: %d must be at least %d", csvColumns[f.col], n, f.lo)
			}
			return "", Point{}, fmt.Errorf("%s: %d is outside %d-%d", csvColumns[f.col], n, f.lo, f.hi)
		}
		*f.dst = n
	}
	v := strings.TrimSpace(rec[cols[colLatency]])
	lat, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsInf(lat, 0) || math.IsNaN(lat) || lat <= 0 {
		return "", Point{}, fmt.Errorf("latency_ms: %q is not a positive number of milliseconds", v)
	}
	pt.Latency = lat
	return model, pt, nil
}

// ImportCSVToDir imports the table at csvPath (see ImportCSV) and writes
// one <model>.yaml per model into outDir ("" is the current directory),
// creating it if needed. It returns how many files it wrote. Nothing is
// written unless the whole table is valid.
func ImportCSVToDir(csvPath, product, outDir string) (int, error) {
	f, err := os.Open(csvPath)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	profiles, err := ImportCSV(f, product)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", csvPath, err)
	}
	files := make(map[string][]byte, len(profiles))
	for _, p := range profiles {
		p.Source = "imported from " + filepath.Base(csvPath) + ": " + p.Source
		data, err := Marshal(p)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.Model, err)
		}
		files[p.Model+".yaml"] = data
	}
	if outDir == "" {
		outDir = "."
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(outDir, name), files[name], 0o644); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
