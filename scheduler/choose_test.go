package scheduler

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
)

// Decisions on the RaPP table, as a person finds them by reading its
// quota-100 rows (shared/data/rapp-v100-latency.csv, columns
// model,batch,sm_percent,quota_percent,latency_ms). With an SLO: among rows
// with latency ≤ SLO, the highest batch×1000/latency/sm. With no SLO:
// batch 1, the smallest sm whose latency is within 10 % of the full-GPU
// latency, which faas-gpu reads as the lowest batch-1 latency at any SM %
// (the envelope at sm 100; docs/profiles.md).
func TestChooseOnRaPPData(t *testing.T) {
	tests := []struct {
		model     string
		slo       time.Duration
		sm, batch int
		latency   float64
	}{
		// resnet50,8,15,100,42.210 -> 8000/42.210/15 = 12.64 req/s per SM%
		// beats resnet50,8,20,100,32.030 -> 12.49 and
		// resnet50,4,10,100,33.458 -> 11.96; resnet50,8,10,100,59.838
		// misses the SLO.
		{"resnet50", 50 * time.Millisecond, 15, 8, 42.210},
		// vgg16,4,40,100,17.467 -> 5.73 beats vgg16,2,20,100,18.013 -> 5.55;
		// vgg16,4,35,100,20.346 and vgg16,8,*,100 (≥ 23.661) miss 20 ms.
		{"vgg16", 20 * time.Millisecond, 40, 4, 17.467},
		// mobilenet_v3_large,8,20,100,10.246 -> 39.04 beats
		// mobilenet_v3_large,8,15,100,14.190 -> 37.58.
		{"mobilenet_v3_large", 15 * time.Millisecond, 20, 8, 10.246},
		// convnext_base,8,30,100,79.819 -> 3.34 beats
		// convnext_base,8,35,100,69.019 -> 3.31 and
		// convnext_base,4,15,100,81.044 -> 3.29.
		{"convnext_base", 100 * time.Millisecond, 30, 8, 79.819},
		// resnet152,4,20,100,44.560 -> 4.49 beats resnet152,2,10,100,45.511
		// -> 4.39; resnet152,4,15,100,58.126 misses 50 ms.
		{"resnet152", 50 * time.Millisecond, 20, 4, 44.560},
		// efficientnet_b0,8,10,100,27.468 -> 29.12 beats
		// efficientnet_b0,4,5,100,27.814 -> 28.76;
		// efficientnet_b0,8,5,100,39.672 misses 30 ms.
		{"efficientnet_b0", 30 * time.Millisecond, 10, 8, 27.468},

		// No SLO. resnet50 batch 1 is lowest at resnet50,1,30,100,19.785;
		// 10 % over is 21.76: resnet50,1,5,100,22.497 is over,
		// resnet50,1,10,100,21.039 is within.
		{"resnet50", 0, 10, 1, 21.039},
		// vgg16,1,100,100,4.593 is the lowest; 10 % over is 5.05:
		// vgg16,1,50,100,5.203 is over, vgg16,1,55,100,4.961 within.
		{"vgg16", 0, 55, 1, 4.961},
		// resnet152 is lowest at resnet152,1,20,100,26.852 (its sm 100 row,
		// 42.537, is slower); 10 % over is 29.54: resnet152,1,5,100,45.991
		// is over, resnet152,1,10,100,29.155 within.
		{"resnet152", 0, 10, 1, 29.155},
		// mobilenet_v3_large,1,85,100,10.042 is the lowest; 10 % over is
		// 11.05: sm 5-20 (14.007, 15.517, 11.780, 14.505) are over,
		// mobilenet_v3_large,1,25,100,10.868 within.
		{"mobilenet_v3_large", 0, 25, 1, 10.868},
	}
	s := builtin(t)
	for _, tt := range tests {
		t.Run(tt.model+"/"+tt.slo.String(), func(t *testing.T) {
			c, err := ChooseModel(s, tt.model, gpu.V100Product, tt.slo, ChooseOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if c.SMPercent != tt.sm || c.Batch != tt.batch || c.LatencyMs != tt.latency {
				t.Errorf("chose sm %d%% batch %d at %v ms, want sm %d%% batch %d at %v ms\n%s",
					c.SMPercent, c.Batch, c.LatencyMs, tt.sm, tt.batch, tt.latency, c.Explanation)
			}
			if want := float64(tt.batch) * 1000 / tt.latency; math.Abs(c.Throughput-want) > 1e-9 {
				t.Errorf("throughput %v, want %v", c.Throughput, want)
			}
		})
	}
}

func TestChooseExplanation(t *testing.T) {
	s := builtin(t)
	c, err := ChooseModel(s, "resnet50", gpu.V100Product, 50*time.Millisecond, ChooseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "resnet50 on Tesla V100-SXM2-16GB: sm 15% batch 8, 42.2 ms ≤ SLO 50ms, 189.5 req/s (12.6 req/s per SM%)"
	if c.Explanation != want {
		t.Errorf("explanation\n got %s\nwant %s", c.Explanation, want)
	}

	c, err = ChooseModel(s, "resnet50", "NVIDIA T4", 50*time.Millisecond, ChooseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = "resnet50 on NVIDIA T4: sm 15% batch 8, 42.2 ms ≤ SLO 50ms, 189.5 req/s (12.6 req/s per SM%) (fallback: profile measured on Tesla V100-SXM2-16GB)"
	if c.Explanation != want || !c.Fallback.Used() {
		t.Errorf("fallback explanation\n got %s\nwant %s", c.Explanation, want)
	}

	// A caller choosing against a bound derived from the SLO names it.
	c, err = ChooseModel(s, "resnet50", gpu.V100Product, 50*time.Millisecond, ChooseOptions{BoundName: "SLO/2"})
	if err != nil {
		t.Fatal(err)
	}
	want = "resnet50 on Tesla V100-SXM2-16GB: sm 15% batch 8, 42.2 ms ≤ SLO/2 (50ms), 189.5 req/s (12.6 req/s per SM%)"
	if c.Explanation != want {
		t.Errorf("named-bound explanation\n got %s\nwant %s", c.Explanation, want)
	}

	c, err = ChooseModel(s, "resnet50", gpu.V100Product, 0, ChooseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = "resnet50 on Tesla V100-SXM2-16GB: sm 10% batch 1, 21.0 ms within 10% of full-GPU 19.8 ms (no SLO), 47.5 req/s (4.8 req/s per SM%)"
	if c.Explanation != want {
		t.Errorf("no-SLO explanation\n got %s\nwant %s", c.Explanation, want)
	}
}

func TestChooseUnmetSLO(t *testing.T) {
	s := builtin(t)
	// resnet50's fastest row is resnet50,1,30,100,19.785.
	_, err := ChooseModel(s, "resnet50", gpu.V100Product, 10*time.Millisecond, ChooseOptions{})
	var unmet *UnmetSLOError
	if !errors.As(err, &unmet) {
		t.Fatalf("err = %v, want an *UnmetSLOError", err)
	}
	if unmet.Best.SMPercent != 30 || unmet.Best.Batch != 1 || unmet.Best.LatencyMs != 19.785 {
		t.Errorf("best = %+v, want sm 30 batch 1 at 19.785 ms", unmet.Best)
	}
	want := "resnet50 on Tesla V100-SXM2-16GB: no slice meets SLO 10ms: best achievable is 19.8 ms (sm 30% batch 1)"
	if err.Error() != want {
		t.Errorf("error\n got %s\nwant %s", err, want)
	}
}

func TestChooseRules(t *testing.T) {
	// Hand-made curves whose answers differ by the rule applied.
	p := &profiles.Profile{Model: "m", GPU: "g", Points: []profiles.Point{
		// per SM %: b1 s10 -> 5.0, b1 s20 -> 2.5, b2 s20 -> 5.0, b4 s40 -> 5.0
		{Batch: 1, SM: 10, Quota: 100, Latency: 20},
		{Batch: 1, SM: 20, Quota: 100, Latency: 20},
		{Batch: 1, SM: 100, Quota: 100, Latency: 10},
		{Batch: 2, SM: 20, Quota: 100, Latency: 20},
		{Batch: 4, SM: 40, Quota: 100, Latency: 20},
		{Batch: 4, SM: 10, Quota: 100, Latency: 90},  // 4.44 per SM %, but slow
		{Batch: 8, SM: 10, Quota: 100, Latency: 100}, // 8.0 per SM %, slowest
		{Batch: 1, SM: 5, Quota: 50, Latency: 1},     // quota 50: never chosen
	}}
	p = indexed(t, p)
	tests := []struct {
		name      string
		slo       time.Duration
		opts      ChooseOptions
		sm, batch int
	}{
		{"efficiency wins over latency; latency equal to the SLO meets it", 100 * time.Millisecond, ChooseOptions{}, 10, 8},
		{"just under the slowest point", 99999 * time.Microsecond, ChooseOptions{}, 10, 1},
		{"equal efficiency: smaller SM first", 25 * time.Millisecond, ChooseOptions{}, 10, 1},
		{"max batch", 100 * time.Millisecond, ChooseOptions{MaxBatch: 4}, 10, 1},
		{"no SLO: within 10 % of sm 100 at batch 1", 0, ChooseOptions{}, 100, 1},
		{"sub-millisecond SLO precision", 19999 * time.Microsecond, ChooseOptions{}, 100, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Choose(p, tt.slo, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.SMPercent != tt.sm || c.Batch != tt.batch {
				t.Errorf("chose sm %d batch %d, want sm %d batch %d: %s", c.SMPercent, c.Batch, tt.sm, tt.batch, c.Explanation)
			}
		})
	}

	// Equal efficiency at equal SM %: the smaller batch.
	q := &profiles.Profile{Model: "q", GPU: "g", Points: []profiles.Point{
		{Batch: 1, SM: 20, Quota: 100, Latency: 10},
		{Batch: 2, SM: 20, Quota: 100, Latency: 20},
	}}
	if c, err := Choose(q, time.Second, ChooseOptions{}); err != nil || c.Batch != 1 {
		t.Errorf("tie on SM %%: batch %d, %v; want batch 1", c.Batch, err)
	}
}

func TestChooseErrors(t *testing.T) {
	p := &profiles.Profile{Model: "m", GPU: "g", Points: []profiles.Point{{Batch: 4, SM: 10, Quota: 100, Latency: 20}}}
	tests := []struct {
		name    string
		slo     time.Duration
		opts    ChooseOptions
		is      error
		wantErr string
	}{
		{"negative SLO", -time.Second, ChooseOptions{}, nil, "SLO -1s is negative"},
		{"negative max batch", time.Second, ChooseOptions{MaxBatch: -1}, nil, "max batch -1"},
		{"no batch under the cap", time.Second, ChooseOptions{MaxBatch: 2}, profiles.ErrNotMeasured, "no batch ≤ 2"},
		{"no SLO needs batch 1", 0, ChooseOptions{}, profiles.ErrNotMeasured, "no points at batch 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Choose(p, tt.slo, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.is)
			}
		})
	}
	if _, err := ChooseModel(profiles.NewStore(), "bert", "g", 0, ChooseOptions{}); !errors.Is(err, profiles.ErrNoProfile) {
		t.Errorf("unknown model: err = %v, want ErrNoProfile", err)
	}
}

// indexed is p as a Store hands it out: validated, its curves indexed.
func indexed(t *testing.T, p *profiles.Profile) *profiles.Profile {
	t.Helper()
	s := profiles.NewStore()
	if err := s.Add(*p); err != nil {
		t.Fatal(err)
	}
	q, _, ok := s.Lookup(p.Model, p.GPU)
	if !ok {
		t.Fatalf("%s on %s: not in the store it was added to", p.Model, p.GPU)
	}
	return q
}
