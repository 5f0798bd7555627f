package sim

import (
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func parseSpecFlags(t *testing.T, args ...string) (Spec, error) {
	t.Helper()
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterSpecFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	s, _, err := f.Spec()
	return s, err
}

// The flags' effects on the spec, the interactions between flags
// included.
func TestSpecFlags(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		check func(Spec) string // what is wrong, or ""
	}{
		{"defaults without a scenario", []string{"-models", "resnet50"}, func(s Spec) string {
			if s.Name != "run" || s.Rate != 10 || s.Duration != time.Minute || s.Seed != 1 || !s.Poisson ||
				s.GPUs != 4 || s.PerNode != 8 || !slices.Equal(s.Policies, PolicyNames()) {
				return "not the flags' defaults"
			}
			return ""
		}},
		// Regression: the default -duration was applied after -trace reset
		// it, so a trace ran for one minute instead of its own length.
		{"a trace without -duration runs for its length", []string{"-trace", "x/w.csv"}, func(s Spec) string {
			if s.Duration != 0 || s.Trace != "x/w.csv" || s.Name != "w" {
				return "duration not reset by -trace"
			}
			return ""
		}},
		{"-parked auto", []string{"-models", "resnet50", "-parked", "auto"}, func(s Spec) string {
			if s.Options.Parked != "auto" {
				return "auto not taken"
			}
			return ""
		}},
		{"-parked 3", []string{"-models", "resnet50", "-parked", "3"}, func(s Spec) string {
			if s.Options.Parked != "3" {
				return "count not taken"
			}
			return ""
		}},
		{"a trace with -duration", []string{"-trace", "w.csv", "-duration", "20s"}, func(s Spec) string {
			if s.Duration != 20*time.Second {
				return "-duration lost"
			}
			return ""
		}},
		{"a scenario's trace resets its duration", []string{"-scenario", "consolidation", "-trace", "w.csv"}, func(s Spec) string {
			if s.Duration != 0 || len(s.Models) != 0 {
				return "scenario's duration or models kept"
			}
			return ""
		}},
		// Regression: without -scenario the default -gpus was applied after
		// -inventory and dropped the file.
		{"-inventory without a scenario", []string{"-models", "resnet50", "-inventory", "inv.yaml"}, func(s Spec) string {
			if s.Inventory != "inv.yaml" {
				return "inventory dropped"
			}
			return ""
		}},
		{"-gpus drops the inventory", []string{"-models", "resnet50", "-inventory", "inv.yaml", "-gpus", "2"}, func(s Spec) string {
			if s.Inventory != "" || s.GPUs != 2 {
				return "-gpus did not replace the inventory"
			}
			return ""
		}},
		{"-rate drops the scenario's ramp", []string{"-scenario", "cost", "-rate", "50"}, func(s Spec) string {
			if s.Ramp != nil || s.Rate != 50 {
				return "ramp kept"
			}
			return ""
		}},
		{"-ramp wins over -rate", []string{"-models", "resnet50", "-rate", "50", "-ramp", "0s:1,10s:2"}, func(s Spec) string {
			if len(s.Ramp) != 2 {
				return "ramp lost"
			}
			return ""
		}},
		{"-burst-rate keeps the base rate", []string{"-scenario", "consolidation", "-burst-rate", "40"}, func(s Spec) string {
			if s.Rate != 80 || s.BurstRate != 40 || s.BurstEvery != time.Minute || s.BurstLength != 10*time.Second {
				return "burst not on top of the scenario's rate with the default period"
			}
			return ""
		}},
		{"contention is built in unless given", []string{"-scenario", "cost"}, func(s Spec) string {
			c, err := s.ContentionModel()
			if err != nil || c == nil || c.Default != DefaultPenalty {
				return "not the built-in contention model"
			}
			return ""
		}},
		{"-contention off", []string{"-scenario", "cost", "-contention", "off"}, func(s Spec) string {
			if c, err := s.ContentionModel(); err != nil || c != nil {
				return "contention not off"
			}
			return ""
		}},
		// -slo-margin 2 plans faas-gpu's batches against the whole SLO:
		// the cost run's ablation row (the provider before SLO/2).
		{"-slo-margin 2", []string{"-scenario", "cost", "-slo-margin", "2"}, func(s Spec) string {
			if s.Options.SLOMargin != 2 {
				return "margin not 2"
			}
			return ""
		}},
		{"scenario values stay unless overridden", []string{"-scenario", "locality", "-warmup", "1s", "-name", "loc2"}, func(s Spec) string {
			if s.Options.Warmup != time.Second || s.Min != 4 || s.Max != 4 || s.Zipf != 1.1 || s.Name != "loc2" || s.Duration != 20*time.Minute {
				return "scenario not kept under the overrides"
			}
			return ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := parseSpecFlags(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			if msg := tt.check(s); msg != "" {
				t.Errorf("%s: %+v", msg, s)
			}
		})
	}
}

func TestSpecFlagsReject(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "-scenario, -trace or -models"},
		{[]string{"-scenario", "locality", "-min", "5"}, "-min"},
		{[]string{"-models", "resnet50", "-duration", "0s"}, "-duration"},
		{[]string{"-models", "resnet50", "-burst-rate", "-1"}, "-burst-rate"},
		{[]string{"-models", "resnet50", "-burst-rate", "5", "-burst-every", "5s"}, "-burst-length"},
		{[]string{"-models", "resnet50", "-burst-every", "0s"}, "-burst-every"},
		{[]string{"-models", "resnet50", "-contention", "no/such/file.csv"}, "-contention"},
		{[]string{"-models", "resnet50", "-contention", ""}, "-contention"},
		{[]string{"-models", "resnet50", "-fast-scale-up", "0"}, "-fast-scale-up"},
		{[]string{"-models", "resnet50", "-fast-scale-up", "1.5"}, "-fast-scale-up"},
		{[]string{"-models", "resnet50", "-slo-margin", "0"}, "-slo-margin"},
		{[]string{"-models", "resnet50", "-slo-margin", "2.5"}, "-slo-margin"},
		{[]string{"-models", "resnet50", "-parked", "-1"}, "-parked"},
		{[]string{"-models", "resnet50", "-parked", "some"}, "-parked"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			if _, err := parseSpecFlags(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// Regression: -burst-rate replaced the base rate during a burst though
// its help says "on top of -rate".
func TestSpecBurstIsOnTopOfTheRate(t *testing.T) {
	s := Spec{Name: "b", Models: []string{"resnet50"}, Rate: 10, BurstRate: 20, BurstEvery: time.Minute, BurstLength: 10 * time.Second,
		Duration: 2 * time.Minute, Seed: 1}
	w, err := s.Workload(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	in, out := 0, 0
	for _, a := range w.Arrivals {
		if a.At >= time.Minute && a.At < time.Minute+10*time.Second {
			in++
		} else {
			out++
		}
	}
	// Even arrivals: 30 req/s for the 10 s burst, 10 req/s for the other 110 s.
	if in < 299 || in > 301 || out < 1099 || out > 1101 {
		t.Fatalf("%d requests in the burst, %d outside; want 300 and 1100", in, out)
	}
}

// The first burst's window starts where the generator's first burst does
// (one period in) and takes the 20 s of backlog after it; a load without
// bursts has none.
func TestSpecFirstBurst(t *testing.T) {
	burst := Spec{Rate: 10, BurstRate: 20, BurstEvery: 110 * time.Second, BurstLength: 11 * time.Second}
	tests := []struct {
		name     string
		spec     Spec
		from, to time.Duration
		ok       bool
	}{
		{"bursts", burst, 110 * time.Second, 141 * time.Second, true},
		{"constant rate", Spec{Rate: 10, BurstEvery: time.Minute, BurstLength: 10 * time.Second}, 0, 0, false},
		{"ramp wins over bursts", func() Spec { s := burst; s.Ramp = Ramp{{At: 0, Rate: 5}}; return s }(), 0, 0, false},
		{"trace", func() Spec { s := burst; s.Trace = "t.csv"; return s }(), 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to, ok := tt.spec.FirstBurst()
			if from != tt.from || to != tt.to || ok != tt.ok {
				t.Errorf("FirstBurst() = %s, %s, %v; want %s, %s, %v", from, to, ok, tt.from, tt.to, tt.ok)
			}
		})
	}
	// The generator's shape for that spec bursts first in [110s, 121s).
	g := Burst{Base: 10, High: 30, Every: 110 * time.Second, Length: 11 * time.Second}
	for at := time.Duration(0); at < 3*time.Minute; at += time.Second {
		if inBurst := g.Rate(at) > 10; inBurst != (at >= 110*time.Second && at < 121*time.Second) {
			t.Fatalf("at %s the generator's burst is %v: FirstBurst's onset and length disagree with it", at, inBurst)
		}
	}
}

// Regression: a trace replayed without a duration ran for the default
// minute, not the trace's own length.
func TestSpecTraceLength(t *testing.T) {
	path := filepath.Join(t.TempDir(), "long.csv")
	if err := os.WriteFile(path, []byte(TraceHeader+"\n0.5,f,resnet50\n100.2,f,resnet50\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := parseSpecFlags(t, "-trace", path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := s.Workload(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if w.Duration != 101*time.Second || len(w.Arrivals) != 2 {
		t.Fatalf("duration %s with %d requests, want 1m41s with 2", w.Duration, len(w.Arrivals))
	}
}

// A multi-model function's SLO factor is of its slowest model's latency:
// of its first, a slower model could never meet it (h16's SLO was set by
// hand for that reason).
func TestSpecMultiModelSLOFactorIsOfTheSlowestModel(t *testing.T) {
	cat, err := BuiltinCatalog()
	if err != nil {
		t.Fatal(err)
	}
	const product = "Tesla V100-SXM2-16GB"
	models := []string{"alexnet", "vgg19_bn", "resnet18"}
	want := time.Duration(0)
	for _, m := range models {
		info, err := cat.model(m, product)
		if err != nil {
			t.Fatal(err)
		}
		want = max(want, time.Duration(math.Ceil(3*float64(info.fullLat)/float64(time.Millisecond)))*time.Millisecond)
	}
	s := Spec{Name: "z", Models: models, MultiModel: true, SLOFactor: 3, Rate: 10, Duration: time.Second, Seed: 1}
	w, err := s.Workload(cat, product)
	if err != nil {
		t.Fatal(err)
	}
	first, err := cat.model("alexnet", product)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.Functions[0].SLO; got != want || got <= 3*first.fullLat {
		t.Errorf("SLO %v, want %v (x3 the slowest model's batch-1 latency; x3 alexnet's is %v)", got, want, 3*first.fullLat)
	}
}
