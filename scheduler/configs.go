package scheduler

import (
	"slices"
	"sort"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// ConfigsFromProfile is the autoscaler's menu for a function with SLO slo:
// every measured (SM %, batch) slice of p at full quota that carries load
// within slo at its p99 (QueueCapacity > 0, the model the autoscaler
// plans with), with the throughput one replica sustains there. slo 0
// lists every slice. Batches above maxBatch are left out when maxBatch >
// 0. Each entry caches its lone-replica capacity at slo (SliceConfig.Lone:
// a chain solved once here, not at every tick).
func ConfigsFromProfile(p *profiles.Profile, slo time.Duration, maxBatch int) []SliceConfig {
	all := ConfigsWithin(p, slo, maxBatch)
	if slo <= 0 {
		return all
	}
	out := all[:0]
	for _, c := range all {
		if c, serves := c.AtSLO(slo, DefaultSLOQuantile); serves {
			out = append(out, c)
		}
	}
	return out
}

// AtSLO is c with its lone-replica capacity cached at slo and quantile
// (SliceConfig.Lone), as ConfigsFromProfile caches it at the plan's SLO,
// and whether c carries load within slo at all (QueueCapacity > 0).
func (c SliceConfig) AtSLO(slo time.Duration, quantile float64) (SliceConfig, bool) {
	if quantile <= 0 {
		quantile = DefaultSLOQuantile
	}
	if c.Lone.SLO != slo || c.Lone.Quantile != quantile {
		c.Lone = LoneRate{SLO: slo, Quantile: quantile, Rate: loneCapacity(c, slo, quantile)}
	}
	return c, QueueCapacity(c, slo, quantile) > 0
}

// ConfigsWithin lists every measured (SM %, batch) slice of p at full
// quota whose batch latency is at most bound (all of them when bound is
// 0), with the throughput one replica sustains there, smallest SM % first.
// It applies no queueing margin: the autoscaler's menu is
// ConfigsFromProfile; this is for bounds that are defined on the bare
// latency (the simulator's packing lower bound).
func ConfigsWithin(p *profiles.Profile, bound time.Duration, maxBatch int) []SliceConfig {
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
		if bound > 0 && lat > float64(bound)/float64(time.Millisecond) {
			continue
		}
		tp, _, err := p.Throughput(pt.Batch, float64(pt.SM))
		if err != nil {
			continue
		}
		slowest := lat
		var steps BatchSteps
		timed := true
		for _, b := range p.Batches(profiles.FullQuota) {
			if b >= pt.Batch {
				break
			}
			l, _, err := p.SliceLatency(b, float64(pt.SM))
			if err != nil {
				timed = false
				continue
			}
			slowest = max(slowest, l)
			if i := slices.IndexFunc(steps[:], func(s BatchStep) bool { return s.Batch == 0 }); i >= 0 && i < maxSteps-1 {
				steps[i] = BatchStep{Batch: int32(b), Ms: float32(l)}
			} else {
				timed = false
			}
		}
		c := SliceConfig{SMPercent: pt.SM, Batch: pt.Batch, Throughput: tp, SlowestMs: slowest}
		if timed {
			i := slices.IndexFunc(steps[:], func(s BatchStep) bool { return s.Batch == 0 })
			steps[i] = BatchStep{Batch: int32(pt.Batch), Ms: float32(lat)}
			c.Steps = steps
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SMPercent != out[j].SMPercent {
			return out[i].SMPercent < out[j].SMPercent
		}
		return out[i].Batch < out[j].Batch
	})
	return out
}
