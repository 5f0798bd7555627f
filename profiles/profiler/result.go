package profiler

import (
	"fmt"
	"math"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// Profile is the profile file content of res: one point per measured
// slice, at quota 100 (MPS partitions, no time quota), its latency the p50
// of the latency phase. Memory, model size and load time are not measured
// and stay unknown.
func (res Result) Profile() (profiles.Profile, error) {
	p := profiles.Profile{
		Model: res.Model,
		GPU:   res.GPU,
		Source: fmt.Sprintf("measured by faas-gpu profile on %s (function %s; latency: p50 of %s with one batch in flight)",
			res.Finished.UTC().Format(time.DateOnly), res.Function, res.Duration),
	}
	for _, m := range res.Points {
		p.Points = append(p.Points, profiles.Point{
			Batch:   m.Batch,
			SM:      m.SM,
			Quota:   profiles.FullQuota,
			Latency: milliseconds(m.Latency.P50),
		})
	}
	// Marshal validates; a bad --model or --gpu fails here, naming the
	// field, before anything is written.
	if _, err := profiles.Marshal(p); err != nil {
		return profiles.Profile{}, fmt.Errorf("profile: %w", err)
	}
	return p, nil
}

// milliseconds rounds to the microsecond: finer digits are noise, and a
// measured latency is never written as 0.
func milliseconds(d time.Duration) float64 {
	return max(math.Round(float64(d)/float64(time.Microsecond))/1000, 0.001)
}
