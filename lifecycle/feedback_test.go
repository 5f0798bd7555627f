package lifecycle

import (
	"testing"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/openfaas/faas-provider/types"
)

// Replicas the queueing model says hold the SLO, but that miss it as the
// proxy measures (neighbours busier than the model's margin, host CPU it
// did not see), are given more capacity: the autoscaler plans for the
// rate times the correction (scheduler.SLOFeedback), and at a tighter SLO
// (SLOFeedback.PlanSLO). Misses within the quantile's budget change
// nothing.
//
// The googlenet rows are misses the rate alone cannot correct: googlenet
// runs a batch in about 23 ms at every slice and batch, so at a 48-ms SLO
// one replica that waits out a running batch and then runs its own just
// holds the SLO on the profile, and the model rates a lone replica far
// above twice 15 req/s. Slowed by neighbours it misses (family6's p12:
// 6.5 %), and the rate alone, at the factor's cap, added nothing.
func TestMeasuredMissesAddCapacity(t *testing.T) {
	store := builtinStore(t)
	googlenet := scheduler.Function{
		Deployment: types.FunctionDeployment{Service: "gn", Namespace: "openfaas-fn", Image: "x"},
		GPU:        gpu.Request{Model: "googlenet", SLO: 48 * time.Millisecond},
		Scale:      scheduler.ScalePolicy{Min: 1, Max: 20},
	}
	tests := []struct {
		name      string
		spec      scheduler.Function
		perSecond uint64
		seconds   int    // of measured misses
		missPerK  uint64 // misses per 1000 requests completed
		backlog   float64
		corrected bool // the factor raised
		more      bool // more replicas in service
	}{
		{"resnet50, misses within the budget: as planned", rnSpec(), 300, 120, 5, 0, false, false},
		{"resnet50, misses at 6 %: more capacity", rnSpec(), 300, 120, 60, 0, true, true},
		// A busy pool has a request or two waiting at many ticks: the
		// misses beside such a queue are the model's (zoo2's zb19).
		{"resnet50, misses at 6 % beside a few waiting: more capacity", rnSpec(), 300, 120, 60, 3, true, true},
		// A queue no SLO's work clears is a cold start's or a burst's:
		// the backlog's own term adds replicas, the model is not blamed.
		{"resnet50, misses at 6 % behind a queue of 10 s: the model as it was", rnSpec(), 300, 120, 60, 3000, false, true},
		{"googlenet, misses within the budget: as planned", googlenet, 15, 300, 5, 0, false, false},
		{"googlenet, misses at 6 %: more capacity", googlenet, 15, 300, 60, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(inventory(1, 4), nil, Options{Profiles: store})
			if _, err := c.Deploy(tt.spec, t0); err != nil {
				t.Fatal(err)
			}
			key := tt.spec.Deployment.Namespace + "/" + tt.spec.Deployment.Service
			l := Load{}
			now := steady(c, key, &l, tt.perSecond, 60)
			before, replicas := capacityOf(c, key), len(c.functions[key].live)
			for range tt.seconds {
				now = now.Add(time.Second)
				l.SLOServed += tt.perSecond
				l.SLOMissed = l.SLOServed * tt.missPerK / 1000
				l.Backlog = tt.backlog
				tickWith(c, key, &l, tt.perSecond, now)
				readyAll(c, now)
			}
			fn := c.functions[key]
			after := capacityOf(c, key)
			t.Logf("SM %% in service: %d -> %d, replicas %d -> %d, factor %.2f, planned SLO %v",
				before, after, replicas, len(fn.live), fn.feedback.Value(), fn.feedback.PlanSLO(tt.spec.GPU.SLO))
			// More replicas, not only a larger slice: googlenet's first
			// replica, sized before its load was known, is replaced by a
			// larger one either way, and a larger slice runs its batch no
			// faster.
			if got := fn.feedback.Value() > 1; got != tt.corrected {
				t.Errorf("factor %.2f: corrected %v, want %v", fn.feedback.Value(), got, tt.corrected)
			}
			if got := len(fn.live) > replicas; got != tt.more {
				t.Errorf("replicas %d -> %d: more %v, want %v", replicas, len(fn.live), got, tt.more)
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

// An sloMenu keeps at most sloMenuMax slices: a multi-model function's
// slices, valued afresh on its moving mix, do not pile up while the
// planned SLO stays the same.
func TestSLOMenuIsBounded(t *testing.T) {
	var m sloMenu
	for i := range 3 * sloMenuMax {
		c := scheduler.SliceConfig{SMPercent: 10, Batch: 1, Throughput: 100 + float64(i)}
		m.at(c, 40*time.Millisecond, 0)
		if len(m.valued) > sloMenuMax {
			t.Fatalf("after %d slices the menu holds %d, want at most %d", i+1, len(m.valued), sloMenuMax)
		}
	}
}
