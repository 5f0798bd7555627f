package scheduler

import (
	"math"
	"testing"
	"time"
)

// A rate estimate's standard error: one interval's count at first, the
// settled EWMA's sqrt(rate x alpha / (2 - alpha)) later.
func TestRateEstimatorError(t *testing.T) {
	alpha := 1 - math.Exp2(-0.1) // 1-s intervals, 10-s half-life
	tests := []struct {
		name    string
		seconds int
		rate    float64
		want    float64
	}{
		{"one second at 10 req/s", 1, 10, math.Sqrt(10)},
		{"four seconds at 10 req/s", 4, 10, math.Sqrt(10.0 / 4)},
		{"five minutes at 10 req/s", 300, 10, math.Sqrt(10 * alpha / (2 - alpha))},
		{"five minutes at 1,000 req/s", 300, 1000, math.Sqrt(1000 * alpha / (2 - alpha))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := RateEstimator{HalfLife: 10 * time.Second}
			for i := 0; i <= tt.seconds; i++ {
				e.Observe(uint64(float64(i)*tt.rate), t0.Add(time.Duration(i)*time.Second))
			}
			// Within 5 %: the first intervals weigh a little more than
			// an even average of them.
			if got := e.Error(); math.Abs(got-tt.want) > 0.05*tt.want {
				t.Errorf("error %.3f req/s, want %.3f", got, tt.want)
			}
		})
	}
}

// A scale-down leaves replicas that serve the demand plus the rate's
// standard error, so that the estimate's wandering does not remove a
// replica the next upward wander adds back; a bursty function's spare
// replicas go as before (to warm ones, the next burst's capacity).
func TestScaleDownLeavesTheRateError(t *testing.T) {
	policy := ScalePolicy{Min: 1, Max: 10}
	later := t0.Add(time.Hour)
	// Two 10 % replicas of 40 req/s; one left serves 40 >= 30 x 1.2.
	two := replicas(configs[0], configs[0])
	tests := []struct {
		name    string
		err     float64
		bursty  bool
		removed int
	}{
		{"no error known", 0, false, 1},
		{"an error within what one replica leaves", 3, false, 1}, // 36 + 3.6 <= 40
		{"an error beyond it", 5, false, 0},                      // 36 + 6 > 40
		{"an error beyond it, bursty", 5, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Autoscale(AutoscaleInput{Now: later, Rate: 30, RateError: tt.err, Bursty: tt.bursty, Policy: policy,
				Replicas: two, Configs: configs}, DefaultAutoscaleOptions)
			if len(d.Remove) != tt.removed || len(d.Add) != 0 {
				t.Errorf("removed %v, added %v, want %d removed (%s)", d.Remove, d.Add, tt.removed, d.Reason)
			}
		})
	}
}

// Where memory is short, two replicas of a function merge into one slice
// of their summed SM though that saves little of the cost: it frees a
// replica's memory. Not where memory is not short, nor into a slice of
// more SM than the two.
func TestResizeMergesToFreeShortMemory(t *testing.T) {
	a := SliceConfig{SMPercent: 10, Batch: 1, Throughput: 40}
	b := SliceConfig{SMPercent: 15, Batch: 1, Throughput: 55}
	c := SliceConfig{SMPercent: 25, Batch: 1, Throughput: 90}
	d := SliceConfig{SMPercent: 30, Batch: 1, Throughput: 90}
	quiet := t0.Add(-time.Hour)
	tests := []struct {
		name    string
		menu    []SliceConfig
		short   bool
		wantNew SliceConfig // zero: no resize
	}{
		// 68 x 1.25 = 85: a + a serve 80, a + b 95, c 90. Cost (memory
		// 12 % each): a + b 12 + 15 = 27, c 25, a saving of 7 %.
		{"memory short", []SliceConfig{a, b, c}, true, c},
		{"memory not short", []SliceConfig{a, b, c}, false, SliceConfig{}},
		{"memory short, the slice larger than the two", []SliceConfig{a, b, d}, true, SliceConfig{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, ok := Resize(ResizeInput{Now: t0, Rate: 68, Policy: ScalePolicy{Min: 1, Max: 10}, Replicas: replicas(a, b),
				Configs: tt.menu, SLO: 10 * time.Second, MemoryPercent: 12, MemoryShort: tt.short,
				LastScaleUp: quiet, LastScaleDown: quiet, LastResize: quiet}, DefaultAutoscaleOptions)
			if ok != (tt.wantNew != SliceConfig{}) || ok && (rep.New != tt.wantNew || len(rep.Old) != 2) {
				t.Errorf("resize %v %+v, want new %+v replacing both", ok, rep, tt.wantNew)
			}
		})
	}
}
