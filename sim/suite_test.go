package sim

import (
	"testing"
	"time"
)

// The held-out suite must span what issue 12 lists; a workload dropped or
// narrowed would leave part of the family unmeasured.
func TestHeldOutSuiteSpansTheWorkloadFamily(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	suite := heldOut()
	if len(suite) < 15 {
		t.Fatalf("%d workloads, want at least 15", len(suite))
	}
	minModels, maxModels := 1<<30, 0
	minZipf, maxZipf := 10.0, -1.0
	minSLO, maxSLO := 100.0, 0.0
	minCold, maxCold := time.Hour, time.Duration(0)
	shapes := map[string]bool{}
	names := map[string]bool{}
	for _, sc := range suite {
		s := sc.spec()
		if names[s.Name] || s.Name != sc.name {
			t.Errorf("%s: name %q repeated or not the spec's", sc.name, s.Name)
		}
		names[s.Name] = true
		inv, err := s.Cluster()
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		wl, err := s.Workload(cat, inv.Devices()[0].Product)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		if err := s.validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		n := len(wl.Models)
		minModels, maxModels = min(minModels, n), max(maxModels, n)
		minZipf, maxZipf = min(minZipf, s.Zipf), max(maxZipf, s.Zipf)
		if s.SLOFactor > 0 && s.SLO == 0 {
			minSLO, maxSLO = min(minSLO, s.SLOFactor), max(maxSLO, s.SLOFactor)
		}
		minCold, maxCold = min(minCold, s.Options.ContainerStart), max(maxCold, s.Options.ContainerStart)
		switch {
		case s.BurstRate > 0:
			shapes["bursts"] = true
		case len(s.Ramp) > 0:
			shapes["ramp"] = true
		default:
			shapes["steady"] = true
		}
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"5 models or fewer", minModels <= 5},
		{"60 models", maxModels >= 60},
		{"uniform popularity", minZipf == 0},
		{"Zipf 1.5", maxZipf >= 1.5},
		{"SLO factor 2", minSLO <= 2},
		{"SLO factor 10", maxSLO >= 10},
		{"cold start 3 s", minCold <= 3*time.Second},
		{"cold start 30 s", maxCold >= 30*time.Second},
		{"bursts, ramps and steady load", len(shapes) == 3},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("the suite lacks %s", c.what)
		}
	}
}

func TestSuiteShapes(t *testing.T) {
	st := steps(time.Minute, 2*time.Minute, 50, 400, 100)
	od := onOff(10*time.Minute, 300, 5*time.Second, time.Minute, 12)
	di := diurnal(20*time.Minute, 40, 500, 30*time.Second)
	tests := []struct {
		name string
		r    Ramp
		at   time.Duration
		want float64
	}{
		{"step before the first edge", st, 59 * time.Second, 50},
		{"step after the first edge", st, 61 * time.Second, 400},
		{"step after the second edge", st, 3*time.Minute + time.Second, 100},
		{"on/off on through the warm-up", od, 59 * time.Second, 300},
		{"on/off off after the warm-up", od, suiteWarmup + time.Second, 0},
		{"diurnal low at the start", di, 0, 40},
		{"diurnal high at noon", di, 10 * time.Minute, 500},
		{"diurnal low at the end", di, 20 * time.Minute, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Rate(tt.at); got < tt.want-1e-6 || got > tt.want+1e-6 {
				t.Errorf("rate at %s = %v, want %v", tt.at, got, tt.want)
			}
		})
	}
	for i := 1; i < len(od); i++ {
		if od[i].At <= od[i-1].At {
			t.Fatalf("on/off: point %d at %s not after %s", i, od[i].At, od[i-1].At)
		}
	}
}

func TestLookupSuite(t *testing.T) {
	tests := []struct {
		sel     string
		want    int
		wantErr bool
	}{
		{"heldout", len(heldOut()), false},
		{"heldout/h14", 1, false},
		{"heldout/zz", 0, true},
		{"zoo", zooCount, false},
		{"zoo/za01", 1, false},
		{"zoo/zz", 0, true},
		{"nosuch", 0, true},
	}
	for _, tt := range tests {
		got, err := lookupSuite(tt.sel)
		if (err != nil) != tt.wantErr || len(got) != tt.want {
			t.Errorf("lookupSuite(%q) = %d workloads, %v; want %d, error %v", tt.sel, len(got), err, tt.want, tt.wantErr)
		}
	}
}

// The family suite is a fixed draw: the same workloads on every call and
// machine, each a valid run, spread over the family's ranges.
func TestFamilySuiteIsAFixedDrawOverTheFamily(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	seeds, prefixes := map[uint64]bool{}, map[string]bool{"h": true}
	draws := []struct {
		list       []familyDraw
		draw       func(uint64, string) ([]scenario, error)
		count      int
		models     [2]int
		multiModel bool
	}{
		{familyDraws, family, familyCount, [2]int{5, 60}, false},
		{zooDraws, zoo, zooCount, [2]int{3, zooMaxModels}, true},
	}
	for _, d := range draws {
		for _, draw := range d.list {
			if seeds[draw.seed] || prefixes[draw.prefix] {
				t.Errorf("%s: seed %d or prefix %q used by another draw", draw.suite, draw.seed, draw.prefix)
			}
			seeds[draw.seed], prefixes[draw.prefix] = true, true
			t.Run(draw.suite, func(t *testing.T) {
				checkDraw(t, cat, d.draw, draw.seed, draw.prefix, d.count, d.models, d.multiModel)
			})
		}
	}
}

// checkDraw checks one draw: fixed, count valid workloads within the
// family's ranges, each naming models[0] to models[1] models, served by
// one function each or (multiModel) all by one.
func checkDraw(t *testing.T, cat *Catalog, draw func(uint64, string) ([]scenario, error), seed uint64, prefix string, count int, models [2]int, multiModel bool) {
	t.Helper()
	a, err := draw(seed, prefix)
	if err != nil {
		t.Fatal(err)
	}
	b, err := draw(seed, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != count {
		t.Fatalf("%d workloads, want %d", len(a), count)
	}
	names := map[string]bool{}
	for i, sc := range a {
		if sc.name != b[i].name || sc.about != b[i].about {
			t.Fatalf("draw %d differs between calls: %q / %q", i, sc.about, b[i].about)
		}
		s := sc.spec()
		if names[s.Name] || s.Name != sc.name {
			t.Errorf("%s: name %q repeated or not the spec's", sc.name, s.Name)
		}
		names[s.Name] = true
		if err := s.validate(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		inv, err := s.Cluster()
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		wl, err := s.Workload(cat, inv.Devices()[0].Product)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		n := len(s.Models)
		if s.MultiModel != multiModel || multiModel && (len(wl.Functions) != 1 || len(wl.Functions[0].Models) != n) {
			t.Errorf("%s: multi-model %v with %d functions, want multi-model %v serving all %d models", s.Name, s.MultiModel, len(wl.Functions), multiModel, n)
		}
		cold := s.Options.ContainerStart
		if n < models[0] || n > models[1] || s.Zipf < 0 || s.Zipf > 1.5 || s.SLOFactor < 2 || s.SLOFactor > 10 || cold < 3*time.Second || cold > 30*time.Second {
			t.Errorf("%s: outside the family: %d models, Zipf %.1f, SLO x%.1f, cold %v", s.Name, n, s.Zipf, s.SLOFactor, cold)
		}
		t.Logf("%s: %s", sc.name, sc.about)
	}
}
