package sim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
)

// TableName is the measured latency table the simulator reads: RaPP's
// V100 measurements at every SM % and time quota (the built-in profiles
// keep quota 100 only, and FaST-GShare's configurations need the quotas).
const TableName = "rapp-v100-latency.csv"

// Catalog is the profiles a run reads latencies, memory and load times
// from.
type Catalog struct {
	Store *profiles.Store
	// Quotas is true when the profiles hold points below quota 100.
	Quotas bool
	// Source says where the profiles came from.
	Source string
}

// FindTable looks for the table where the repository keeps it, beside the
// checkout in ../shared/data: relative to dir and to each of its parents
// that holds a go.mod (the repository root, from a package directory in
// tests). It returns "" when there is none.
func FindTable(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return ""
	}
	for d := dir; ; d = filepath.Dir(d) {
		p := filepath.Join(d, "..", "shared", "data", TableName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || filepath.Dir(d) == d {
			return ""
		}
	}
}

// LoadTable imports the measured table at path (the profiles import
// format: model,batch,sm_percent,quota_percent,latency_ms) as profiles of
// a V100, keeping only the rows of the given models (all when nil):
// parsing all 55k rows takes half a second, a few models a few
// milliseconds.
func LoadTable(path string, models []string) (*Catalog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("profiles table: %w", err)
	}
	defer f.Close()
	keep := map[string]bool{}
	for _, m := range models {
		keep[m] = true
	}
	var buf bytes.Buffer
	sc := bufio.NewScanner(f)
	first := true
	seen := map[string]bool{}
	for sc.Scan() {
		line := sc.Bytes()
		if first || models == nil || keep[string(modelField(line))] {
			buf.Write(line)
			buf.WriteByte('\n')
			seen[string(modelField(line))] = true
		}
		first = false
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("profiles table %s: %w", path, err)
	}
	for _, m := range models {
		if !seen[m] {
			return nil, fmt.Errorf("profiles table %s: no rows for model %q", path, m)
		}
	}
	profs, err := profiles.ImportCSV(&buf, gpu.V100Product)
	if err != nil {
		return nil, fmt.Errorf("profiles table %s: %w", path, err)
	}
	store := profiles.NewStore()
	for _, p := range profs {
		if err := store.Add(p); err != nil {
			return nil, err
		}
	}
	return &Catalog{Store: store, Quotas: true, Source: path}, nil
}

func modelField(line []byte) []byte {
	if i := bytes.IndexByte(line, ','); i >= 0 {
		return line[:i]
	}
	return line
}

// BuiltinCatalog is the provider's built-in profiles (quota 100 only):
// enough for every policy but fast-gshare.
func BuiltinCatalog() (*Catalog, error) {
	s, err := profiles.Builtin()
	if err != nil {
		return nil, err
	}
	return &Catalog{Store: s, Source: "built-in profiles (quota 100 only)"}, nil
}

// modelInfo is what the simulator needs of one model.
type modelInfo struct {
	name    string
	prof    *profiles.Profile
	size    int64         // GPU memory the model takes in a process that has a context
	memory  int64         // one replica serving it, CUDA context included
	load    time.Duration // cold load into a new process
	fullLat time.Duration // batch 1 on the whole GPU
	batches []int         // measured at quota 100, ascending
	// splits are the host and GPU parts of the batches that have one,
	// ascending (profiles.Split); penalty is its interference penalty
	// under contention.
	splits  []profiles.Split
	penalty float64
}

// contextBytes is what a process pays before its first model: the
// footprint model's CUDA context and framework (docs/profiles.md), read
// off the model as the footprint of a model with no parameters.
var contextBytes = profiles.EstimateFootprint(0).MemoryBytes

func (c *Catalog) model(name, product string) (modelInfo, error) {
	p, _, ok := c.Store.Lookup(name, product)
	if !ok {
		return modelInfo{}, fmt.Errorf("model %q: %w", name, profiles.ErrNoProfile)
	}
	m := modelInfo{name: name, prof: p, size: p.ModelSizeBytes, memory: p.MemoryBytes, load: p.LoadTime}
	if m.memory == 0 {
		return modelInfo{}, fmt.Errorf("model %q: its profile has no memory footprint: the simulator needs one", name)
	}
	if m.size == 0 {
		m.size = max(m.memory-contextBytes, 1)
	}
	lat, err := scheduler.LatencyAt(p, 1, 100)
	if err != nil {
		return modelInfo{}, fmt.Errorf("model %q: %w", name, err)
	}
	m.fullLat = ms(lat)
	m.batches = p.Batches(profiles.FullQuota)
	for _, b := range m.batches {
		if s, err := p.Split(b); err == nil {
			m.splits = append(m.splits, s)
		}
	}
	return m, nil
}

// quotas lists the quotas measured at batch 1, ascending.
func quotasOf(p *profiles.Profile) []int {
	seen := map[int]bool{}
	for _, pt := range p.Points {
		if pt.Batch == 1 {
			seen[pt.Quota] = true
		}
	}
	out := make([]int, 0, len(seen))
	for q := range seen {
		out = append(out, q)
	}
	slices.Sort(out)
	return out
}

// smsOf lists the SM % measured at batch 1 and quota q, ascending.
func smsOf(p *profiles.Profile, q int) []int {
	var out []int
	for _, pt := range p.Points {
		if pt.Batch == 1 && pt.Quota == q {
			out = append(out, pt.SM)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

var errNoQuotas = errors.New("needs the profiles' time quotas: give --profiles-csv the full table (" + TableName + ")")
