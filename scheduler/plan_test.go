package scheduler

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/openfaas/faas-provider/types"
)

var (
	builtinOnce  sync.Once
	builtinStore *profiles.Store
	builtinErr   error
)

func builtin(t testing.TB) *profiles.Store {
	t.Helper()
	builtinOnce.Do(func() { builtinStore, builtinErr = profiles.Builtin() })
	if builtinErr != nil {
		t.Fatal(builtinErr)
	}
	return builtinStore
}

// TestPlanFunctionHoldsBatchesToHalfTheSLO checks the queueing margin on
// the built-in ResNet-50 profile (19.8 ms at batch 1 on a whole V100,
// 22.5 ms on 5 % SM): a request may wait out one running batch, so the
// chosen batch latency, and every slice of the autoscaler's menu, is at
// most SLO/2.
func TestPlanFunctionHoldsBatchesToHalfTheSLO(t *testing.T) {
	store := builtin(t)
	tests := []struct {
		name      string
		slo       time.Duration
		sm        int
		wantIn    []string // in the decision
		wantBound time.Duration
		wantField string // a refusal naming this field
	}{
		{name: "roomy SLO: batches within SLO/2", slo: 100 * time.Millisecond, wantIn: []string{"ms ≤ SLO/2 (50ms)"}, wantBound: 50 * time.Millisecond},
		{name: "the resnet50 SLO of the docs", slo: 50 * time.Millisecond, wantIn: []string{"ms ≤ SLO/2 (25ms)"}, wantBound: 25 * time.Millisecond},
		{
			// 30 ms: SLO/2 = 15 ms is below any slice (19.8 ms at best), but
			// batches meet 30 ms: accepted, planned at the SLO, with a warning.
			name: "met at the SLO only: accepted with a warning", slo: 30 * time.Millisecond,
			wantIn: []string{"ms ≤ SLO 30ms,", "; warning: no slice meets SLO/2 (15ms)"}, wantBound: 30 * time.Millisecond,
		},
		{name: "met nowhere: refused naming the SLO", slo: 10 * time.Millisecond, wantField: gpu.AnnotationSLO},
		{name: "explicit SM between SLO/2 and the SLO is warned about", slo: 40 * time.Millisecond, sm: 5, wantIn: []string{"above SLO/2 = 20ms"}},
		{name: "explicit SM above the SLO is flagged as before", slo: 20 * time.Millisecond, sm: 5, wantIn: []string{"(above the SLO of 20ms)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := Function{
				Deployment: types.FunctionDeployment{Service: "rn", Namespace: "openfaas-fn"},
				GPU:        gpu.Request{Model: "resnet50", SLO: tt.slo, SMPercent: tt.sm},
				Scale:      ScalePolicy{Min: 1, Max: 10},
			}
			pl, err := PlanFunction(spec, store, gpu.V100Product)
			if tt.wantField != "" {
				var fe *gpu.FieldError
				if !errors.As(err, &fe) || fe.Field != tt.wantField || !strings.Contains(err.Error(), "SLO "+tt.slo.String()) {
					t.Fatalf("err = %v, want a FieldError on %s naming SLO %s", err, tt.wantField, tt.slo)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.wantIn {
				if !strings.Contains(pl.Decision, want) {
					t.Fatalf("decision %q, want it to say %q", pl.Decision, want)
				}
			}
			if tt.sm > 0 {
				return // an explicit SM % is taken as asked
			}
			boundMs := float64(tt.wantBound) / float64(time.Millisecond)
			if lat, err := LatencyAt(pl.Profile, pl.Base.Batch, float64(pl.Base.SMPercent)); err != nil || lat > boundMs {
				t.Fatalf("base slice %+v: %.1f ms (%v), want ≤ %s", pl.Base, lat, err, tt.wantBound)
			}
			if len(pl.Configs) == 0 {
				t.Fatal("an autoscaled function needs a menu")
			}
			for _, c := range pl.Configs {
				if lat, _ := LatencyAt(pl.Profile, c.Batch, float64(c.SMPercent)); lat > boundMs {
					t.Fatalf("menu slice %+v: %.1f ms above the bound %s", c, lat, tt.wantBound)
				}
			}
			if !containsConfig(pl.Configs, pl.Base) {
				t.Fatalf("the base slice %+v is not on the menu %v", pl.Base, pl.Configs)
			}
		})
	}
}

func containsConfig(cs []SliceConfig, c SliceConfig) bool {
	for _, x := range cs {
		if x.SMPercent == c.SMPercent && x.Batch == c.Batch {
			return true
		}
	}
	return false
}

// TestConfigsWithinIsTheBareLatency: ConfigsFromProfile(slo) is
// ConfigsWithin(slo/2) when that has slices; ConfigsWithin applies no
// margin (the simulator's packing bound reads it at the SLO).
func TestConfigsWithinIsTheBareLatency(t *testing.T) {
	p, _, ok := builtin(t).Lookup("resnet50", gpu.V100Product)
	if !ok {
		t.Fatal("no resnet50 profile")
	}
	slo := 100 * time.Millisecond
	menu, half, full := ConfigsFromProfile(p, slo, 0), ConfigsWithin(p, slo/2, 0), ConfigsWithin(p, slo, 0)
	if len(menu) == 0 || len(menu) != len(half) || len(full) <= len(half) {
		t.Fatalf("menu %d slices, within SLO/2 %d, within the SLO %d: want menu = SLO/2 < SLO", len(menu), len(half), len(full))
	}
	if b, safe := PlanBound(p, slo, 0); b != slo/2 || !safe {
		t.Fatalf("PlanBound(%s) = %s, %v; want %s, true", slo, b, safe, slo/2)
	}
	if b, safe := PlanBound(p, 30*time.Millisecond, 0); b != 30*time.Millisecond || safe {
		t.Fatalf("PlanBound(30ms) = %s, %v; want the SLO itself, false", b, safe)
	}
}
