package scheduler

import (
	"math"
	"slices"
	"testing"
	"time"
)

// burstTrace feeds h one smoothed rate a second for seconds, as the core
// does: the offered rate is base, or high within a burst ([start,
// start+length) of one of the onsets), smoothed with a 10-s half-life.
func burstTrace(h *RateHistory, seconds int, base, high float64, length time.Duration, onsets ...time.Duration) {
	smoothed := base
	alpha := 1 - math.Exp2(-1.0/10)
	for s := 1; s <= seconds; s++ {
		at := time.Duration(s) * time.Second
		offered := base
		for _, o := range onsets {
			if at >= o && at < o+length {
				offered = high
			}
		}
		smoothed += alpha * (offered - smoothed)
		h.Observe(t0.Add(at), smoothed)
	}
}

// A burst period is learnt from the smoothed rate alone: three onsets at
// intervals that agree. Steady noise, a single burst or irregular ones
// predict nothing.
func TestRateHistoryLearnsABurstPeriod(t *testing.T) {
	tests := []struct {
		name     string
		seconds  int
		onsets   []time.Duration
		learning bool
		period   time.Duration // 0: none
	}{
		{"steady", 300, nil, false, 0},
		{"one burst, over", 80, []time.Duration{30 * time.Second}, true, 0},
		{"two bursts: an interval, no period yet", 170, []time.Duration{30 * time.Second, 120 * time.Second}, true, 0},
		{"three bursts 90 s apart", 230, []time.Duration{30 * time.Second, 120 * time.Second, 210 * time.Second}, false, 90 * time.Second},
		{"three bursts 60 s then 150 s apart", 280, []time.Duration{30 * time.Second, 90 * time.Second, 240 * time.Second}, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := RateHistory{Window: 10 * time.Minute}
			burstTrace(&h, tt.seconds, 100, 400, 15*time.Second, tt.onsets...)
			if got := h.Learning(); got != tt.learning {
				t.Errorf("Learning %v, want %v", got, tt.learning)
			}
			p, ok := h.Period()
			if ok != (tt.period > 0) {
				t.Fatalf("Period %v, %v; want %v", p, ok, tt.period)
			}
			// The smoothed rate crosses at the same lag every burst.
			if ok && (p < tt.period-time.Second || p > tt.period+time.Second) {
				t.Errorf("Period %v, want %v", p, tt.period)
			}
		})
	}
	t.Run("noise around a steady rate is no burst", func(t *testing.T) {
		h := RateHistory{Window: 10 * time.Minute}
		for s := range 600 {
			h.Observe(t0.Add(time.Duration(s)*time.Second), 100+8*math.Sin(float64(s)))
		}
		if len(h.onsets) != 0 || h.Bursty() {
			t.Errorf("%d onsets, bursty %v, from a steady rate", len(h.onsets), h.Bursty())
		}
	})
}

// ExpectedBurst is due from lead before the onset the period points at to
// a quarter period after it, with the last burst's peak; not during a
// burst, and not again once a due burst failed to come.
func TestExpectedBurst(t *testing.T) {
	lead := 20 * time.Second
	h := RateHistory{Window: 10 * time.Minute}
	onsets := []time.Duration{30 * time.Second, 120 * time.Second, 210 * time.Second}
	burstTrace(&h, 250, 100, 400, 15*time.Second, onsets...)
	p, ok := h.Period()
	if !ok {
		t.Fatal("no period")
	}
	next := h.onsets[len(h.onsets)-1].Add(p)
	tests := []struct {
		name string
		at   time.Time
		due  bool
	}{
		{"well before", next.Add(-lead - 5*time.Second), false},
		{"a lead before", next.Add(-lead + time.Second), true},
		{"at the onset", next, true},
		{"a quarter period late", next.Add(p/4 - time.Second), true},
		{"past it", next.Add(p/4 + time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peak, due := h.ExpectedBurst(tt.at, lead)
			if due != tt.due {
				t.Fatalf("due %v, want %v", due, tt.due)
			}
			if due && (peak < 200 || peak > 400) {
				t.Errorf("peak %.0f, want the last burst's smoothed peak (200-400 req/s)", peak)
			}
		})
	}
	t.Run("a burst seen moves the next a period on", func(t *testing.T) {
		h := RateHistory{Window: 10 * time.Minute}
		burstTrace(&h, 310, 100, 400, 15*time.Second, append(onsets, 300*time.Second)...)
		if !h.inBurst {
			t.Fatal("the fourth burst was not seen")
		}
		if _, due := h.ExpectedBurst(t0.Add(310*time.Second), lead); due {
			t.Error("the burst that came is still expected")
		}
		if _, due := h.ExpectedBurst(t0.Add(390*time.Second-lead/2), lead); !due {
			t.Error("the next burst, a period on, is not expected")
		}
	})
}

// PlannedPeak is the highest rate planned for within the last burst,
// never under its smoothed peak: rates planned between bursts do not
// count, and a new onset starts it afresh.
func TestPlannedPeak(t *testing.T) {
	h := RateHistory{Window: 10 * time.Minute}
	s := 0
	feed := func(seconds int, rate float64) {
		for range seconds {
			s++
			h.Observe(t0.Add(time.Duration(s)*time.Second), rate)
		}
	}
	feed(60, 100)
	if _, _, ok := h.PlannedPeak(); ok {
		t.Fatal("a planned peak before any burst")
	}
	feed(10, 300)
	h.ObservePlanned(700) // within the burst
	feed(30, 100)
	h.ObservePlanned(900) // after it
	peak, onset, ok := h.PlannedPeak()
	if !ok || peak != 700 || !onset.Equal(t0.Add(61*time.Second)) {
		t.Errorf("planned peak %.0f from %v (%v), want 700 from the onset at 61 s", peak, onset.Sub(t0), ok)
	}
	feed(10, 300)
	if peak, _, _ = h.PlannedPeak(); peak != 300 {
		t.Errorf("planned peak %.0f after a new onset, want its smoothed peak 300", peak)
	}
}

// A swell that takes minutes to its peak (a diurnal, a ramp) is followed
// by the autoscaler in time: it is no burst to hold warm replicas for.
func TestSwellIsNotLearnt(t *testing.T) {
	h := RateHistory{Window: 10 * time.Minute}
	for s := range 600 {
		rate := 100.0
		switch {
		case s >= 60 && s < 240:
			rate = 100 + 400*float64(s-60)/180
		case s >= 240 && s < 300:
			rate = 500
		case s >= 300 && s < 480:
			rate = 500 - 400*float64(s-300)/180
		}
		h.Observe(t0.Add(time.Duration(s)*time.Second), rate)
	}
	if h.Learning() {
		t.Error("a 3-minute ramp up and down held as a burst")
	}
}

// The window's rates are kept in order as they come and go: the base is
// read from them every tick.
func TestRateHistoryKeepsItsWindowSorted(t *testing.T) {
	h := RateHistory{Window: 30 * time.Second}
	for s := range 200 {
		// Repeats and a wide spread, so that deletions hit equal values.
		h.Observe(t0.Add(time.Duration(s)*time.Second), float64((s*37)%11)*10)
		want := slices.Sorted(slices.Values(h.rates))
		if !slices.Equal(h.sorted, want) {
			t.Fatalf("after %d s: sorted %v, want %v", s, h.sorted, want)
		}
	}
}
