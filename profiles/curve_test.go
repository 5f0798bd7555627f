package profiles

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/faas-gpu/faas-gpu/gpu"
)

// noisy is a batch-1 curve at quota 100 whose latency rises at sm 30 and
// 50 (as the RaPP data often does) and a batch-4 curve measured from sm 20.
func noisy(t testing.TB) *Profile {
	t.Helper()
	p := Profile{Model: "m", GPU: "g", Points: []Point{
		{Batch: 1, SM: 10, Quota: 100, Latency: 40},
		{Batch: 1, SM: 20, Quota: 100, Latency: 20},
		{Batch: 1, SM: 30, Quota: 100, Latency: 30}, // noise: slower than sm 20
		{Batch: 1, SM: 50, Quota: 100, Latency: 25}, // still slower than sm 20
		{Batch: 1, SM: 80, Quota: 100, Latency: 10},
		{Batch: 4, SM: 20, Quota: 100, Latency: 60},
		{Batch: 4, SM: 40, Quota: 100, Latency: 30},
		{Batch: 1, SM: 10, Quota: 50, Latency: 80},
		{Batch: 1, SM: 20, Quota: 50, Latency: 40},
	}}
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestLatency(t *testing.T) {
	p := noisy(t)
	tests := []struct {
		name  string
		batch int
		sm    float64
		quota int
		want  float64
		est   Estimate
	}{
		{"measured point", 1, 20, 100, 20, Exact},
		{"first measured point", 1, 10, 100, 40, Exact},
		{"midpoint", 1, 15, 100, 30, Interpolated},
		{"quarter point", 1, 12.5, 100, 35, Interpolated},
		{"noisy point reads the envelope", 1, 30, 100, 20, Exact},
		{"noisy point reads the envelope 2", 1, 50, 100, 20, Exact},
		{"between envelope points", 1, 40, 100, 20, Interpolated},
		{"after the noise", 1, 65, 100, 15, Interpolated},
		{"largest measured", 1, 80, 100, 10, Exact},
		{"above the range is clamped", 1, 100, 100, 10, Clamped},
		{"other batch", 4, 30, 100, 45, Interpolated},
		{"other quota", 1, 15, 50, 60, Interpolated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, est, err := p.Latency(tt.batch, tt.sm, tt.quota)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(got-tt.want) > 1e-9 || est != tt.est {
				t.Errorf("Latency(%d, %v, %d) = %v %s, want %v %s", tt.batch, tt.sm, tt.quota, got, est, tt.want, tt.est)
			}
		})
	}
}

func TestLatencyErrors(t *testing.T) {
	p := noisy(t)
	tests := []struct {
		name         string
		batch        int
		sm           float64
		quota        int
		is           error
		wantContains string
	}{
		{"below the range", 1, 5, 100, ErrBelowRange, "smallest measured is 10%"},
		{"below the range of a batch", 4, 15, 100, ErrBelowRange, "smallest measured is 20%"},
		{"batch not measured", 2, 20, 100, ErrNotMeasured, "measured batches: 1, 4"},
		{"quota not measured", 1, 20, 70, ErrNotMeasured, "no points at quota 70%"},
		{"sm zero", 1, 0, 100, nil, "outside (0, 100]"},
		{"sm above 100", 1, 100.5, 100, nil, "outside (0, 100]"},
		{"sm NaN", 1, math.NaN(), 100, nil, "outside (0, 100]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := p.Latency(tt.batch, tt.sm, tt.quota)
			if err == nil || !strings.Contains(err.Error(), tt.wantContains) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantContains)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.is)
			}
		})
	}
}

func TestThroughputAndHelpers(t *testing.T) {
	p := noisy(t)
	thr, est, err := p.Throughput(4, 40)
	if err != nil || thr != 4*1000/30.0 || est != Exact {
		t.Errorf("Throughput(4, 40) = %v %s %v, want %v exact", thr, est, err, 4*1000/30.0)
	}
	if _, _, err := p.Throughput(4, 10); !errors.Is(err, ErrBelowRange) {
		t.Errorf("Throughput below the range: err = %v", err)
	}
	if got := p.Batches(FullQuota); len(got) != 2 || got[0] != 1 || got[1] != 4 {
		t.Errorf("Batches(100) = %v", got)
	}
	if lo, hi, ok := p.SMRange(4, FullQuota); !ok || lo != 20 || hi != 40 {
		t.Errorf("SMRange(4, 100) = %d %d %v", lo, hi, ok)
	}
	if _, _, ok := p.SMRange(3, FullQuota); ok {
		t.Error("SMRange of an unmeasured batch is ok")
	}
}

// A Profile literal that never went through Parse or a Store still answers.
func TestLatencyOfUnindexedProfile(t *testing.T) {
	p := &Profile{Model: "m", GPU: "g", Points: []Point{
		{Batch: 1, SM: 50, Quota: 100, Latency: 10},
		{Batch: 1, SM: 10, Quota: 100, Latency: 30},
	}}
	got, est, err := p.SliceLatency(1, 30)
	if err != nil || got != 20 || est != Interpolated {
		t.Errorf("SliceLatency(1, 30) = %v %s %v, want 20 interpolated", got, est, err)
	}
	if p.curves != nil {
		t.Error("a read stored an index in a Profile that may be shared")
	}
}

// Every built-in curve, read at fine SM steps, never gets slower with more
// SMs, whatever the noise in the measurements.
func TestLatencyMonotoneOnBuiltin(t *testing.T) {
	s := builtinStore(t)
	for _, model := range s.Models() {
		p, _, _ := s.Lookup(model, gpu.V100Product)
		for _, batch := range p.Batches(FullQuota) {
			lo, _, _ := p.SMRange(batch, FullQuota)
			prev := math.Inf(1)
			for sm := float64(lo); sm <= 100; sm += 0.5 {
				lat, _, err := p.SliceLatency(batch, sm)
				if err != nil {
					t.Fatalf("%s batch %d sm %v: %v", model, batch, sm, err)
				}
				if lat > prev {
					t.Fatalf("%s batch %d: latency rises from %v to %v at sm %v", model, batch, prev, lat, sm)
				}
				prev = lat
			}
		}
	}
}

// Curves and Curve give the measured points with the envelope latency, in
// the order Latency reads them, and the same errors as Latency for what was
// not measured.
func TestCurves(t *testing.T) {
	p := noisy(t)
	type pt struct {
		sm  int
		lat float64
	}
	read := func(c Curve) []pt {
		var out []pt
		for i := range c.Len() {
			out = append(out, pt{c.SM(i), c.Latency(i)})
		}
		return out
	}
	tests := []struct {
		batch, quota int
		want         []pt
	}{
		// sm 30 and 50 take sm 20's 20 ms: the envelope.
		{1, FullQuota, []pt{{10, 40}, {20, 20}, {30, 20}, {50, 20}, {80, 10}}},
		{4, FullQuota, []pt{{20, 60}, {40, 30}}},
		{1, 50, []pt{{10, 80}, {20, 40}}},
	}
	for _, tt := range tests {
		c, err := p.Curve(tt.batch, tt.quota)
		if err != nil {
			t.Fatalf("Curve(%d, %d): %v", tt.batch, tt.quota, err)
		}
		if got := read(c); c.Batch != tt.batch || c.Quota != tt.quota || !slices.Equal(got, tt.want) {
			t.Errorf("Curve(%d, %d) = batch %d quota %d %v, want %v", tt.batch, tt.quota, c.Batch, c.Quota, got, tt.want)
		}
	}
	all := p.Curves(FullQuota)
	if len(all) != 2 || all[0].Batch != 1 || all[1].Batch != 4 || !slices.Equal(read(all[1]), tests[1].want) {
		t.Errorf("Curves(100): %d curves, batches %v", len(all), func() (b []int) {
			for _, c := range all {
				b = append(b, c.Batch)
			}
			return b
		}())
	}
	if got := p.Curves(10); len(got) != 0 {
		t.Errorf("Curves(10) = %d curves, want none", len(got))
	}
	for _, k := range [][2]int{{2, FullQuota}, {1, 10}} {
		if _, err := p.Curve(k[0], k[1]); !errors.Is(err, ErrNotMeasured) {
			t.Errorf("Curve(%d, %d): err = %v, want ErrNotMeasured", k[0], k[1], err)
		}
	}
}
