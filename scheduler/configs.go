package scheduler

import (
	"sort"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// ConfigsFromProfile lists every measured (SM %, batch) slice of p at full
// quota whose latency meets slo (all of them when slo is 0), with the
// throughput one replica sustains there: the autoscaler's menu. Batches
// above maxBatch are left out when maxBatch > 0.
func ConfigsFromProfile(p *profiles.Profile, slo time.Duration, maxBatch int) []SliceConfig {
	seen := map[[2]int]bool{}
	var out []SliceConfig
	for _, pt := range p.Points {
		if pt.Quota != profiles.FullQuota || (maxBatch > 0 && pt.Batch > maxBatch) || seen[[2]int{pt.SM, pt.Batch}] {
			continue
		}
		seen[[2]int{pt.SM, pt.Batch}] = true
		lat, _, err := p.SliceLatency(pt.Batch, float64(pt.SM))
		if err != nil {
			continue
		}
		if slo > 0 && lat > float64(slo)/float64(time.Millisecond) {
			continue
		}
		tp, _, err := p.Throughput(pt.Batch, float64(pt.SM))
		if err != nil {
			continue
		}
		out = append(out, SliceConfig{SMPercent: pt.SM, Batch: pt.Batch, Throughput: tp})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SMPercent != out[j].SMPercent {
			return out[i].SMPercent < out[j].SMPercent
		}
		return out[i].Batch < out[j].Batch
	})
	return out
}
