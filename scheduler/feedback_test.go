package scheduler

import (
	"math"
	"testing"
	"time"
)

func TestSLOFeedback(t *testing.T) {
	const budget = 0.01
	type step struct {
		served, missed uint64 // per second, for seconds
		seconds        int
		settled        bool
	}
	tests := []struct {
		name  string
		steps []step
		want  float64 // the factor after them
	}{
		{"misses within the budget: none", []step{{300, 2, 120, true}}, 1},
		{"misses at 5 % while settled: raised once a window", []step{{300, 15, 9, true}}, feedbackStep},
		{"misses at 5 % while not settled (a cold start): none", []step{{300, 15, 60, false}}, 1},
		{"misses at 5 % right after settling: counted from then", []step{{300, 15, 30, false}, {300, 0, 60, true}}, 1},
		{"misses at 5 % on and on: raised step by step to the cap", []step{{300, 15, 600, true}}, feedbackMaxFactor},
		{"a few requests, a few misses: not significant", []step{{2, 0, 9, true}, {2, 1, 1, true}}, 1},
		{"raised, then within a quarter of the budget for ten minutes: back towards 1",
			[]step{{300, 15, 5, true}, {300, 0, 600, true}}, 1 + (feedbackStep-1)/4},
		{"raised, then at the budget: held", []step{{300, 15, 5, true}, {300, 3, 600, true}}, feedbackStep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f SLOFeedback
			var served, missed uint64
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			f = f.Observe(now, 0, 0, true, budget)
			for _, s := range tt.steps {
				for range s.seconds {
					now = now.Add(time.Second)
					served, missed = served+s.served, missed+s.missed
					f = f.Observe(now, served, missed, s.settled, budget)
				}
			}
			if got := f.Value(); got < tt.want*0.97 || got > tt.want*1.03 {
				t.Errorf("factor %.3f, want %.3f", got, tt.want)
			}
		})
	}
}

func TestSLOFeedbackRestartsOnACounterThatWentBack(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := SLOFeedback{}.Observe(now, 1000, 500, true, 0.01)
	// A provider restart: the counts start again from 0; what came
	// before is not this window's.
	now = now.Add(time.Second)
	f = f.Observe(now, 100, 0, true, 0.01)
	if f.Value() != 1 {
		t.Fatalf("factor %.3f after a counter reset, want 1", f.Value())
	}
	for s := range 5 {
		now = now.Add(time.Second)
		f = f.Observe(now, uint64(400+300*s), uint64(30+30*s), true, 0.01)
	}
	if f.Value() != feedbackStep {
		t.Fatalf("factor %.3f after 10 %% misses, want %.2f", f.Value(), feedbackStep)
	}
}

// The planned SLO shares the correction with the rate: the SLO over the
// factor's square root, in steps, so that a factor relaxing a little at
// every tick does not value the menu afresh at every tick.
func TestSLOFeedbackPlanSLO(t *testing.T) {
	slo := 48 * time.Millisecond
	tests := []struct {
		name   string
		factor float64
		want   time.Duration
	}{
		{"zero value: the SLO", 0, slo},
		{"factor 1: the SLO", 1, slo},
		{"within half a step of 1: the SLO", 1.015, slo},
		{"one raise (1.15): over 1.08", feedbackStep, time.Duration(float64(slo) / 1.08)},
		{"the cap (2): over 1.42", feedbackMaxFactor, time.Duration(float64(slo) / 1.42)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := (SLOFeedback{Factor: tt.factor}).PlanSLO(slo); (got - tt.want).Abs() > time.Microsecond {
				t.Errorf("PlanSLO = %v, want %v", got, tt.want)
			}
		})
	}
}

// A slice valued at another SLO caches its lone rate there, and says
// whether it carries load within it at all.
func TestSliceConfigAtSLO(t *testing.T) {
	c := SliceConfig{SMPercent: 10, Batch: 4, Throughput: 170, SlowestMs: 23.5}
	for i := range 4 {
		c.Steps[i] = BatchStep{Batch: int32(i + 1), Ms: 23}
	}
	at, serves := c.AtSLO(48*time.Millisecond, 0)
	if !serves || at.Lone.SLO != 48*time.Millisecond || at.Lone.Quantile != DefaultSLOQuantile {
		t.Fatalf("at 48 ms: serves %v, cached %+v", serves, at.Lone)
	}
	if again, _ := at.AtSLO(48*time.Millisecond, 0); again != at {
		t.Errorf("valued twice at one SLO: %+v, then %+v", at, again)
	}
	if _, serves := c.AtSLO(20*time.Millisecond, 0); serves {
		t.Error("a 23-ms batch carries load within a 20-ms SLO")
	}
}

func TestSettledBacklog(t *testing.T) {
	tests := []struct {
		name       string
		throughput float64
		slo        time.Duration
		want       float64
	}{
		{"one SLO's work of the pool", 50, 100 * time.Millisecond, 5},
		{"a fast pool at a tight SLO", 2000, 20 * time.Millisecond, 40},
		{"no replica: only an empty queue", 0, 100 * time.Millisecond, 0},
		{"no SLO: only an empty queue", 50, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SettledBacklog(tt.throughput, tt.slo); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("SettledBacklog(%v, %v) = %v, want %v", tt.throughput, tt.slo, got, tt.want)
			}
		})
	}
}
