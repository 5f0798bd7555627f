package lifecycle

import (
	"strings"
	"testing"
	"time"
)

func TestPassesSchedule(t *testing.T) {
	tests := []struct {
		name       string
		tick, rise time.Duration
		wakes      []time.Duration // after start
		want       string          // T for Tick, R for Rise, per wake-up
		interval   time.Duration
	}{
		{"rise between ticks", time.Second, 250 * time.Millisecond,
			[]time.Duration{250, 500, 750, 1000, 1250, 1500, 1750, 2000}, "RRRTRRRT", 250 * time.Millisecond},
		{"jitter: a little early is the tick", time.Second, 250 * time.Millisecond,
			[]time.Duration{251, 499, 760, 990, 1240}, "RRRTR", 250 * time.Millisecond},
		{"rise at the tick: ticks only", time.Second, time.Second,
			[]time.Duration{1000, 2000, 3000}, "TTT", time.Second},
		{"no rise: ticks only", time.Second, 0,
			[]time.Duration{1000, 2000}, "TT", time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPasses(tt.tick, tt.rise, t0)
			if p.Interval() != tt.interval {
				t.Errorf("interval %s, want %s", p.Interval(), tt.interval)
			}
			var got strings.Builder
			for _, ms := range tt.wakes {
				if p.TickDue(t0.Add(ms * time.Millisecond)) {
					got.WriteByte('T')
				} else {
					got.WriteByte('R')
				}
			}
			if got.String() != tt.want {
				t.Errorf("passes %s, want %s", got.String(), tt.want)
			}
		})
	}
}
