package scheduler

import (
	"testing"
	"time"
)

// A scale-up that only a rise seen on one interval calls for, or a
// smoothed rate above capacity by less than its own standard error, is
// tentative (the backend adds it only where a GPU in use has room); one
// that the smoothed rate beyond its error, the backlog, a confirmed rise
// or the scale minimum calls for is firm.
func TestAutoscaleTentative(t *testing.T) {
	policy := ScalePolicy{Min: 1, Max: 10}
	one := replicas(configs[0]) // 40 req/s at full batches; demand is rate x 1.2
	tests := []struct {
		name      string
		in        AutoscaleInput
		tentative bool
	}{
		{"a rise seen once", AutoscaleInput{Rate: 20, Rising: 100, Replicas: one}, true},
		{"a rise seen twice", AutoscaleInput{Rate: 20, Rising: 100, RiseConfirmed: true, Replicas: one}, false},
		{"the smoothed rate alone", AutoscaleInput{Rate: 50, Replicas: one}, false},
		{"a rise seen once, the smoothed rate above capacity too", AutoscaleInput{Rate: 50, Rising: 100, Replicas: one}, false},
		// 20 x 1.2 + 100 / 5 s = 44 > 40
		{"a rise seen once, with a backlog the replicas do not drain", AutoscaleInput{Rate: 20, Rising: 100, Backlog: 100, Replicas: one}, false},
		{"a rise seen once, below the scale minimum", AutoscaleInput{Rate: 20, Rising: 100, Policy: ScalePolicy{Min: 2, Max: 10}, Replicas: one}, false},
		// 34 x 1.2 = 40.8 > 40, but (34 - 1) x 1.2 = 39.6 is served: the
		// gap is within the rate's own noise.
		{"the smoothed rate within its error of capacity", AutoscaleInput{Rate: 34, RateError: 1, Replicas: one}, true},
		{"the smoothed rate beyond its error", AutoscaleInput{Rate: 34, RateError: 0.2, Replicas: one}, false},
		// A bursty function's rate is no noise around a steady one.
		{"bursty, within its error", AutoscaleInput{Rate: 34, RateError: 1, Bursty: true, Replicas: one}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			in.Now, in.Configs = t0, configs
			if in.Policy == (ScalePolicy{}) {
				in.Policy = policy
			}
			d := Autoscale(in, DefaultAutoscaleOptions)
			if len(d.Add) == 0 {
				t.Fatalf("no scale-up: %+v", d)
			}
			if d.Tentative != tt.tentative {
				t.Errorf("tentative %v, want %v (%s)", d.Tentative, tt.tentative, d.Reason)
			}
		})
	}
}

// A rise is confirmed by the interval before it, not by one that
// follows a fall, nor by a single interval however high.
func TestRateEstimatorRiseConfirmed(t *testing.T) {
	tests := []struct {
		name      string
		last      [2]uint64 // requests in the last two seconds, after 2 min at 100 req/s
		confirmed bool
	}{
		{"steady", [2]uint64{100, 105}, false},
		{"one second of a step", [2]uint64{100, 200}, false},
		{"two seconds of a step", [2]uint64{200, 200}, true},
		{"a rise that fell back", [2]uint64{200, 100}, false},
		{"a rise after a fall", [2]uint64{20, 200}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := RateEstimator{HalfLife: 10 * time.Second}
			for i := range 121 {
				e.Observe(uint64(i)*100, t0.Add(time.Duration(i)*time.Second))
			}
			n := uint64(120 * 100)
			for i, c := range tt.last {
				n += c
				e.Observe(n, t0.Add(time.Duration(121+i)*time.Second))
			}
			if got := e.RiseConfirmed(); got != tt.confirmed {
				t.Errorf("confirmed %v, want %v (rising %.1f, smoothed %.1f)", got, tt.confirmed, e.Rising(), e.Rate())
			}
		})
	}
}
