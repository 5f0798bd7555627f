package sim

import (
	"bytes"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestTraceRoundTrip(t *testing.T) {
	wl, err := Generator{Functions: []Function{{Name: "a", Model: "resnet50"}, {Name: "zoo", Model: "vgg16", Models: []string{"vgg16", "alexnet"}}},
		Shape: Constant(100), Poisson: true, Duration: 3 * time.Second, Seed: 7}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteTrace(&buf, wl); err != nil {
		t.Fatal(err)
	}
	back, err := ReadTrace(&buf, TraceOptions{SLO: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Arrivals) != len(wl.Arrivals) {
		t.Fatalf("%d requests back, want %d", len(back.Arrivals), len(wl.Arrivals))
	}
	for i, a := range back.Arrivals {
		w := wl.Arrivals[i]
		if a.At != w.At.Truncate(time.Microsecond) || back.Functions[a.Fn].Name != wl.Functions[w.Fn].Name || back.Models[a.Model] != wl.Models[w.Model] {
			t.Fatalf("request %d: %+v, want %+v", i, a, w)
		}
	}
	zoo := back.Functions[1]
	if !zoo.MultiModel() || zoo.SLO != time.Second {
		t.Errorf("zoo read back as %+v", zoo)
	}
}

func TestReadTraceErrors(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"empty", "", "line 1"},
		{"bad header", "t,f,m\n", "header"},
		{"bad time", TraceHeader + "\nsoon,f,resnet50\n", "line 2: time"},
		{"negative time", TraceHeader + "\n-1,f,resnet50\n", "line 2: time"},
		{"unsorted", TraceHeader + "\n2,f,resnet50\n1,f,resnet50\n", "line 3: time 1 is before"},
		{"bad function", TraceHeader + "\n0,F_1,resnet50\n", "line 2: function"},
		{"bad model", TraceHeader + "\n0,f,-x\n", "line 2: model"},
		{"columns", TraceHeader + "\n0,f\n", "line 2"},
		{"no requests", TraceHeader + "\n", "no requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadTrace(strings.NewReader(tt.text), TraceOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestGenerators(t *testing.T) {
	one := []Function{{Name: "f", Model: "resnet50"}}
	tests := []struct {
		name      string
		g         Generator
		requests  int
		tolerance float64 // fraction
	}{
		{"constant, even", Generator{Functions: one, Shape: Constant(20), Duration: 10 * time.Second}, 200, 0},
		{"constant, poisson", Generator{Functions: one, Shape: Constant(200), Poisson: true, Duration: 100 * time.Second, Seed: 1}, 20000, 0.02},
		// 0 -> 100 over 100 s, then 100 for 100 s: 5,000 + 10,000.
		{"ramp, poisson", Generator{Functions: one, Shape: Ramp{{0, 0}, {100 * time.Second, 100}}, Poisson: true, Duration: 200 * time.Second, Seed: 2}, 15000, 0.03},
		// 10 req/s base, 110 during 10 s of every 60 s: 600 + 1000.
		{"burst, even", Generator{Functions: one, Shape: Burst{Base: 10, High: 110, Every: time.Minute, Length: 10 * time.Second}, Duration: 2 * time.Minute}, 10*120 + 100*10, 0.01},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := tt.g.Workload()
			if err != nil {
				t.Fatal(err)
			}
			got := float64(len(w.Arrivals))
			if math.Abs(got-float64(tt.requests)) > tt.tolerance*float64(tt.requests)+1 {
				t.Errorf("%v requests, want %d ± %.0f %%", got, tt.requests, 100*tt.tolerance)
			}
		})
	}
}

// Even generation gives a Zipf mix in exact proportion: 1/rank^s.
func TestZipfMix(t *testing.T) {
	fns := []Function{{Name: "a", Model: "resnet50"}, {Name: "b", Model: "vgg16"}, {Name: "c", Model: "alexnet"}, {Name: "d", Model: "resnet18"}}
	w, err := Generator{Functions: fns, Weights: ZipfWeights(4, 1), Shape: Constant(100), Duration: 25 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	count := make([]int, 4)
	for _, a := range w.Arrivals {
		count[a.Fn]++
	}
	h := 1 + 1.0/2 + 1.0/3 + 1.0/4
	for i, c := range count {
		want := 2500 / h / float64(i+1)
		if math.Abs(float64(c)-want) > 1 {
			t.Errorf("function %d: %d requests, want %.1f", i, c, want)
		}
	}
}

func TestGeneratorIsDeterministic(t *testing.T) {
	g := Generator{Functions: []Function{{Name: "zoo", Model: "a1", Models: []string{"a1", "b2", "c3"}}}, ModelSkew: 1.1,
		Shape: Ramp{{0, 10}, {time.Minute, 100}}, Poisson: true, Duration: time.Minute, Seed: 42}
	a, _ := g.Workload()
	b, _ := g.Workload()
	g.Seed = 43
	c, _ := g.Workload()
	if len(a.Arrivals) != len(b.Arrivals) {
		t.Fatal("same seed, different workloads")
	}
	for i := range a.Arrivals {
		if a.Arrivals[i] != b.Arrivals[i] {
			t.Fatalf("same seed, request %d differs", i)
		}
	}
	if len(a.Arrivals) == len(c.Arrivals) && a.Arrivals[len(a.Arrivals)/2] == c.Arrivals[len(c.Arrivals)/2] {
		t.Error("another seed gave the same workload")
	}
}

func TestResolveModels(t *testing.T) {
	tests := []struct {
		sel  []string
		want string
	}{
		{[]string{"resnet50*2", "vgg16"}, "resnet50 resnet50 vgg16"},
		{[]string{"largest:2"}, "regnet_y_128gf convnext_large"},
		{[]string{"smallest:1"}, "squeezenet1_0"},
		{[]string{"spread:3"}, "alexnet mnasnet0_5 resnet152"},
	}
	for _, tt := range tests {
		got, err := ResolveModels(tt.sel)
		if err != nil || strings.Join(got, " ") != tt.want {
			t.Errorf("%v: got %v, %v; want %s", tt.sel, got, err, tt.want)
		}
	}
	for _, bad := range []string{"largest:0", "largest:x", "x*0", "", "spread:70"} {
		if _, err := ResolveModels([]string{bad}); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if n, _ := ResolveModels([]string{"all"}); len(n) != 69 {
		t.Errorf("all: %d models, want 69", len(n))
	}
}

func TestParseRamp(t *testing.T) {
	r, err := ParseRamp("0s:20,90s:110,180:20")
	if err != nil || len(r) != 3 || r[1].At != 90*time.Second || r[2].At != 180*time.Second || r.Rate(45*time.Second) != 65 {
		t.Fatalf("got %v, %v", r, err)
	}
	if back, _ := ParseRamp(r.String()); back.String() != r.String() {
		t.Errorf("round trip %s -> %s", r, back)
	}
	for _, bad := range []string{"1s", "1s:x", "2s:1,1s:2", "x:1", "1s:-1"} {
		if _, err := ParseRamp(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The bound for one function at a constant rate, worked out by hand.
func TestLowerBound(t *testing.T) {
	cat := synthCatalog(t, m("m10", 10))
	// 100 req/s for 10 s; 10 ms at any SM %: 5 % SM serves 100 req/s, so
	// 0.05 GPUs by SM; one replica (1.5 GiB) is 1.5/16 GPU by memory.
	wl, err := Generator{Functions: []Function{{Name: "f", Model: "m10", SLO: 50 * time.Millisecond}}, Shape: Constant(100), Duration: 10 * time.Second}.Workload()
	if err != nil {
		t.Fatal(err)
	}
	lb, err := ComputeLowerBound(wl, cat, "Tesla V100-SXM2-16GB", 16<<30, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string][2]float64{
		"SM":    {lb.SMGPUSeconds, 0.05 * 10},
		"total": {lb.GPUSeconds, 1.5 / 16 * 10},
		"whole": {lb.WholeGPUSeconds, 10},
	} {
		if math.Abs(v[0]-v[1]) > 1e-9 {
			t.Errorf("%s: %v GPU-s, want %v", name, v[0], v[1])
		}
	}
}

// The shipped trace replays under the built-in profiles.
func TestShippedTraceReplays(t *testing.T) {
	f, err := os.Open("testdata/ramp-3-models.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	wl, err := ReadTrace(f, TraceOptions{SLO: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(wl.Functions) != 3 || len(wl.Arrivals) != 1385 || wl.Duration < wl.Arrivals[len(wl.Arrivals)-1].At {
		t.Fatalf("%d functions, %d requests, %s", len(wl.Functions), len(wl.Arrivals), wl.Duration)
	}
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(Config{Workload: wl, Inventory: cluster(t, 2, 2), Catalog: cat, Policies: []string{"time-sharing", "lalb-o3", "faas-gpu"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Completed != len(wl.Arrivals) {
			t.Errorf("%s completed %d of %d", r.Policy, r.Completed, len(wl.Arrivals))
		}
	}
}
