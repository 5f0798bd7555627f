package scheduler

import (
	"testing"
	"time"
)

func TestParkedNeed(t *testing.T) {
	at := func(secs ...float64) []time.Time {
		var ts []time.Time
		for _, s := range secs {
			ts = append(ts, time.Unix(0, 0).Add(time.Duration(s*float64(time.Second))))
		}
		return ts
	}
	tests := []struct {
		name   string
		starts []time.Time
		window time.Duration
		max    int
		want   int
	}{
		{"no starts yet: one", nil, 10 * time.Second, 8, 1},
		{"starts further apart than a start-up: one", at(0, 10, 20, 30), 10 * time.Second, 8, 1},
		{"three within a start-up", at(0, 1, 9.5, 30), 10 * time.Second, 8, 3},
		{"the densest span counts, unsorted", at(50, 0, 52, 51, 1, 53), 5 * time.Second, 8, 4},
		{"bounded by max", at(0, 0, 0, 0, 0), 10 * time.Second, 3, 3},
		{"no room for any", at(0, 1), 10 * time.Second, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParkedNeed(tt.starts, tt.window, tt.max); got != tt.want {
				t.Fatalf("ParkedNeed = %d, want %d", got, tt.want)
			}
		})
	}
}
