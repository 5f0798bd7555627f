package lifecycle

import (
	"testing"
	"time"
)

// Replicas the queueing model says hold the SLO, but that miss it as the
// proxy measures (neighbours busier than the model's margin, host CPU it
// did not see), are given more capacity: the autoscaler plans for the
// rate times the correction (scheduler.SLOFeedback). Misses within the
// quantile's budget change nothing.
func TestMeasuredMissesAddCapacity(t *testing.T) {
	store := builtinStore(t)
	tests := []struct {
		name     string
		missPerK uint64 // misses per 1000 requests completed
		more     bool
	}{
		{"misses within the budget: as planned", 5, false},
		{"misses at 6 %: more capacity", 60, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 4), nil, Options{Profiles: store})
			if _, err := c.Deploy(rnSpec(), t0); err != nil {
				t.Fatal(err)
			}
			l := Load{}
			now := steady(c, rnKey, &l, 300, 60)
			before := capacityOf(c, rnKey)
			for range 120 {
				now = now.Add(time.Second)
				l.SLOServed += 300
				l.SLOMissed += 300 * tt.missPerK / 1000
				tickWith(c, rnKey, &l, 300, now)
				readyAll(c, now)
			}
			after := capacityOf(c, rnKey)
			t.Logf("SM %% in service: %d -> %d, factor %.2f", before, after, c.functions[rnKey].feedback.Value())
			if got := after > before; got != tt.more {
				t.Errorf("SM %% in service %d -> %d: more %v, want %v", before, after, got, tt.more)
			}
		})
	}
}

// capacityOf is the SM % of function key's replicas in service.
func capacityOf(c *Core, key string) int {
	sum := 0
	for _, r := range c.functions[key].live {
		sum += r.config.SMPercent
	}
	return sum
}
