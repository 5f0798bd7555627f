package scheduler

import (
	"testing"
	"time"
)

func TestWarmLifetime(t *testing.T) {
	s := time.Second
	ttl := 10 * time.Minute
	cases := []struct {
		name string
		gaps []time.Duration
		free float64
		want time.Duration
	}{
		{"no gaps known: the upper bound", nil, 1, ttl},
		{"too few gaps to trust", []time.Duration{5 * s, 5 * s}, 1, ttl},
		{"twice the 90th percentile", []time.Duration{10 * s, 20 * s, 30 * s, 40 * s, 50 * s, 60 * s, 70 * s, 80 * s, 90 * s, 100 * s}, 1, 180 * s},
		{"one long gap among ten is the 100th, not the 90th", []time.Duration{20 * s, 20 * s, 20 * s, 20 * s, 20 * s, 20 * s, 20 * s, 20 * s, 20 * s, 900 * s}, 1, 40 * s},
		{"never above the bound", []time.Duration{400 * s, 500 * s, 600 * s}, 1, ttl},
		{"never below the autoscaler's cool-down", []time.Duration{s, s, s}, 1, MinWarmLifetime},
		{"half the memory free: full lifetime", nil, 0.5, ttl},
		{"a quarter free: half the lifetime", nil, 0.25, ttl / 2},
		{"full GPU: the floor", nil, 0, MinWarmLifetime},
		{"gaps and pressure together", []time.Duration{100 * s, 100 * s, 100 * s}, 0.25, 100 * s},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := WarmLifetime(tc.gaps, tc.free, ttl); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestWarmExpired(t *testing.T) {
	s := time.Second
	ttl := 10 * time.Minute
	onoff := []time.Duration{60 * s, 60 * s, 60 * s, 60 * s}
	cases := []struct {
		name string
		in   WarmInput
		want bool
	}{
		{"active function: kept until the bound", WarmInput{WarmFor: 9 * time.Minute, FreeMemory: 1}, false},
		{"active function: gone at the bound", WarmInput{WarmFor: ttl, FreeMemory: 1}, true},
		{"active function on a crowded GPU: gone sooner", WarmInput{WarmFor: 6 * time.Minute, FreeMemory: 0.25}, true},
		{"idle within its usual gaps: kept", WarmInput{WarmFor: 100 * s, IdleFor: 100 * s, Gaps: onoff, FreeMemory: 1}, false},
		{"idle twice its usual gap: gone", WarmInput{WarmFor: 130 * s, IdleFor: 120 * s, Gaps: onoff, FreeMemory: 1}, true},
		{"idle long but just warm: kept for the cool-down", WarmInput{WarmFor: 10 * s, IdleFor: time.Hour, Gaps: onoff, FreeMemory: 1}, false},
		{"idle, no history: the bound decides", WarmInput{WarmFor: 5 * time.Minute, IdleFor: 5 * time.Minute, FreeMemory: 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			in.Max = ttl
			if got := WarmExpired(in); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRateHistoryBursty(t *testing.T) {
	t0 := time.Unix(0, 0)
	window := 10 * time.Minute
	steps := func(rates ...float64) []float64 { return rates }
	cases := []struct {
		name  string
		rates []float64 // one a 10 s tick
		want  bool
	}{
		{"no history", nil, false},
		{"one rate", steps(100), false},
		{"steady with noise", steps(120, 126, 114, 121, 118, 125, 117), false},
		{"ramping up", steps(0, 20, 60, 100, 120), false},
		{"a step down of a quarter (capacity trimmed, load steady)", steps(160, 160, 120, 120), false},
		{"after a burst: 180 down to 60", steps(60, 60, 180, 180, 120, 60, 60), true},
		{"quiet after busy", steps(40, 40, 0, 0), true},
		{"never any load", steps(0, 0, 0), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := RateHistory{Window: window}
			for i, r := range tc.rates {
				h.Observe(t0.Add(time.Duration(i)*10*time.Second), r)
			}
			if got := h.Bursty(); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a burst beyond the window is forgotten", func(t *testing.T) {
		h := RateHistory{Window: window}
		h.Observe(t0, 180)
		for d := 10 * time.Second; d <= window+20*time.Second; d += 10 * time.Second {
			h.Observe(t0.Add(d), 60)
		}
		if h.Bursty() {
			t.Error("bursty from a peak older than the window")
		}
	})
}

func TestIsIdleGap(t *testing.T) {
	s := time.Second
	cases := []struct {
		name string
		d    time.Duration
		rate float64
		want bool
	}{
		{"under MinIdleGap", 500 * time.Millisecond, 0, false},
		{"the spacing of a slow function's requests", 3 * s, 0.4, false},
		{"ten of its arrivals' time", 25 * s, 0.4, true},
		{"a pause of a busy function", 2 * s, 100, true},
		{"no rate known", 2 * s, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsIdleGap(tc.d, tc.rate); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInIdleGap(t *testing.T) {
	s := time.Second
	ttl := 10 * time.Minute
	onoff := []time.Duration{60 * s, 60 * s, 60 * s, 60 * s}
	cases := []struct {
		name  string
		idle  time.Duration
		rate  float64
		gaps  []time.Duration
		never bool // no request yet
		want  bool
	}{
		{"no request yet", 0, 0, nil, true, false},
		{"a request this tick", 0, 100, nil, false, false},
		{"under a second idle", 900 * time.Millisecond, 0, nil, false, false},
		{"idle 2 s at 100 req/s: stopped, within the lifetime", 2 * s, 100, nil, false, true},
		{"idle 5 s at 1 req/s: fewer than 10 arrivals' time", 5 * s, 1, nil, false, false},
		{"idle 15 s at 1 req/s", 15 * s, 1, nil, false, true},
		{"rate decayed to zero", 30 * s, 0, nil, false, true},
		{"within twice its usual gaps", 100 * s, 50, onoff, false, true},
		{"past twice its usual gaps: gone", 130 * s, 50, onoff, false, false},
		{"no gaps known: gone at the TTL", ttl, 50, nil, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			last := t0.Add(-tc.idle)
			if tc.never {
				last = time.Time{}
			}
			if got := InIdleGap(t0, last, tc.rate, tc.gaps, ttl); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
