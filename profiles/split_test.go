package profiles

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// curveProfile is a one-model profile whose batch-1 curve at full quota
// is lat(sm) at the given SM shares.
func curveProfile(t *testing.T, sms []int, lat func(sm float64) float64) *Profile {
	t.Helper()
	p := Profile{Model: "m", GPU: "g"}
	for _, sm := range sms {
		p.Points = append(p.Points, Point{Batch: 1, SM: sm, Quota: 100, Latency: lat(float64(sm))})
	}
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestSplit(t *testing.T) {
	grid := []int{10, 20, 25, 50, 100}
	tests := []struct {
		name      string
		lat       func(sm float64) float64
		host, gpu float64
	}{
		{name: "host plus GPU recovered exactly", lat: func(sm float64) float64 { return 6 + 4*100/sm }, host: 6, gpu: 4},
		{name: "flat curve is all host", lat: func(float64) float64 { return 20 }, host: 20, gpu: 0},
		{name: "pure 1/sm is all GPU", lat: func(sm float64) float64 { return 3 * 100 / sm }, host: 0, gpu: 3},
		// Latency that grows with SMs is noise the envelope removes: the
		// envelope is flat from the first point, so all host.
		{name: "rising curve reads the envelope", lat: func(sm float64) float64 { return 10 + sm/10 }, host: 11, gpu: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := curveProfile(t, grid, tt.lat).Split(1)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(s.HostMs-tt.host) > 1e-9 || math.Abs(s.GPUMs-tt.gpu) > 1e-9 {
				t.Errorf("split = host %v gpu %v, want %v %v", s.HostMs, s.GPUMs, tt.host, tt.gpu)
			}
			if s.RMSError > 1e-9 || s.MaxError > 1e-9 || s.Points != len(grid) {
				t.Errorf("exact curve: rms %v max %v points %d", s.RMSError, s.MaxError, s.Points)
			}
		})
	}
}

// A curve the model cannot follow (a roofline: flat, then 1/sm) reports
// its error instead of hiding it.
func TestSplitReportsFitError(t *testing.T) {
	roof := func(sm float64) float64 { return max(20, 6*100/sm) }
	s, err := curveProfile(t, []int{5, 10, 20, 30, 50, 100}, roof).Split(1)
	if err != nil {
		t.Fatal(err)
	}
	if s.MaxError < 0.05 || s.RMSError <= 0 || s.RMSError > s.MaxError {
		t.Errorf("roofline fit: rms %v max %v, want a visible error", s.RMSError, s.MaxError)
	}
	if s.HostMs <= 0 || s.GPUMs <= 0 {
		t.Errorf("roofline fit: host %v gpu %v, want both parts", s.HostMs, s.GPUMs)
	}
	if got := s.GPUPartMs(50); math.Abs(got-s.GPUMs*2) > 1e-12 {
		t.Errorf("GPUPartMs(50) = %v, want %v", got, 2*s.GPUMs)
	}
}

func TestSplitErrors(t *testing.T) {
	p := curveProfile(t, []int{50, 100}, func(sm float64) float64 { return 100 / sm })
	if _, err := p.Split(1); err == nil || !strings.Contains(err.Error(), "at least 3") {
		t.Errorf("two SM shares: err = %v, want one asking for 3", err)
	}
	if _, err := p.Split(8); !errors.Is(err, ErrNotMeasured) {
		t.Errorf("unmeasured batch: err = %v, want ErrNotMeasured", err)
	}
}
