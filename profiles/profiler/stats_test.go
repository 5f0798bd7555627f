package profiler

import (
	"errors"
	"testing"
	"time"
)

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

func TestPercentileIsNearestRank(t *testing.T) {
	ten := []time.Duration{ms(1), ms(2), ms(3), ms(4), ms(5), ms(6), ms(7), ms(8), ms(9), ms(10)}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one value is every percentile", []time.Duration{ms(7)}, 99, ms(7)},
		{"p50 of ten is the fifth", ten, 50, ms(5)},
		{"p90 of ten is the ninth", ten, 90, ms(9)},
		{"p99 of ten is the largest", ten, 99, ms(10)},
		{"p100 is the largest", ten, 100, ms(10)},
		{"tiny p is the smallest", ten, 0.1, ms(1)},
		{"p50 of two is the lower, never a mean", []time.Duration{ms(1), ms(3)}, 50, ms(1)},
		{"p50 of three is the middle", []time.Duration{ms(1), ms(2), ms(30)}, 50, ms(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestRecorderStats(t *testing.T) {
	r := &recorder{}
	for i := 100; i >= 1; i-- { // out of order, as workers finish
		r.ok(ms(float64(i)))
	}
	r.fail(errors.New("HTTP 502"))
	st := r.stats(4, 2*time.Second)
	want := Stats{InFlight: 4, Requests: 100, Errors: 1, Window: 2 * time.Second, P50: ms(50), P90: ms(90), P99: ms(99), Throughput: 50, LastError: "HTTP 502"}
	if st != want {
		t.Fatalf("stats = %+v\nwant    %+v", st, want)
	}
	if n, errs, p50 := r.snapshot(); n != 100 || errs != 1 || p50 != ms(50) {
		t.Fatalf("snapshot = %d, %d, %v", n, errs, p50)
	}
}

func TestCheckRefusesAPhaseThatMeasuredNothingWorking(t *testing.T) {
	ph := phase{Label: "sm 10%", Window: time.Second}
	tests := []struct {
		name string
		st   Stats
		want string // "" : no error
	}{
		{"all fine", Stats{Requests: 100}, ""},
		{"1 % failed is tolerated", Stats{Requests: 99, Errors: 1}, ""},
		{"2 % failed is not", Stats{Requests: 98, Errors: 2, LastError: "HTTP 500"}, "sm 10%: 2 of 100 requests failed, more than 1% (last: HTTP 500)"},
		{"all failed", Stats{Errors: 5, LastError: "HTTP 502"}, "sm 10%: all 5 requests failed (last: HTTP 502)"},
		{"none completed", Stats{}, "sm 10%: no request completed in 1s: a request takes longer than --duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(ph, tt.st)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Fatalf("check = %q, want %q", got, tt.want)
			}
		})
	}
}
