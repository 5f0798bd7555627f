package scheduler

import (
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
