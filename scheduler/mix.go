package scheduler

import (
	"math"
	"sort"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
)

// ModelShare is one model of a multi-model (X-Model) function's mix: its
// profile and its share of the function's requests.
type ModelShare struct {
	Profile *profiles.Profile
	Share   float64
}

// Mix is what a multi-model function's replicas serve: the models its
// requests name, by share, and the model loads they cause. A replica's
// slice is planned from its function's first model alone otherwise, which
// says nothing of a heavier model that most requests name, nor of the
// seconds a replica spends loading models it does not hold.
type Mix struct {
	Models []ModelShare
	// LoadPerRequest is the expected model-load time per request
	// (seconds): loads per request x the mean load time (MixLoad). It
	// goes into the demand (MixDemand), not the slices: a load is a rare
	// long wait, not a part of every batch, and folded into a batch's
	// latency it would rule out every batch but the smallest at the SLO.
	LoadPerRequest float64
}

// MixDemand is the factor by which a multi-model function's request rate
// is raised for the time its replicas spend loading models: each request
// brings LoadPerRequest seconds of a replica's time, which at the fastest
// slice on the menu would have served LoadPerRequest x its throughput
// requests. 1 without loads or a menu.
func MixDemand(loadPerRequest float64, menu []SliceConfig) float64 {
	fastest := 0.0
	for _, c := range menu {
		fastest = max(fastest, c.Throughput)
	}
	return 1 + max(loadPerRequest, 0)*fastest
}

// MixLoad is the expected load time per request from the loads and
// requests counted over the same window, each load taking the shares'
// mean of the models' profiled LoadTime: which model missed is not
// counted, and the popular ones, which miss least, weigh most, so it errs
// short where rare heavy models miss.
func MixLoad(models []ModelShare, loads, requests float64) float64 {
	if requests <= 0 || loads <= 0 {
		return 0
	}
	mean, total := 0.0, 0.0
	for _, m := range models {
		if m.Share > 0 && m.Profile != nil {
			mean += m.Share * m.Profile.LoadTime.Seconds()
			total += m.Share
		}
	}
	if total <= 0 {
		return 0
	}
	return min(loads/requests, 1) * mean / total
}

// CacheFloor is how many replicas, each with room bytes for models (its
// memory less its process's own), hold the models that carry quantile of
// a multi-model function's requests, the most requested first: a lower
// bound (the sizes' sum over room), since a model is not split. Below it
// a scale-down sends the removed replica's models to the replicas left,
// which load each one while the requests for it wait, and then load back
// what that evicted (the zoo suite's za12, docs/evaluation.md: each step
// from two replicas to one missed most of a second's requests, and was
// undone within the second). 0 where room is not known.
func CacheFloor(models []ModelShare, room int64, quantile float64) int {
	if room <= 0 {
		return 0
	}
	if quantile <= 0 || quantile >= 1 {
		quantile = DefaultSLOQuantile
	}
	byShare := make([]ModelShare, 0, len(models))
	total := 0.0
	for _, m := range models {
		if m.Share > 0 && m.Profile != nil {
			byShare = append(byShare, m)
			total += m.Share
		}
	}
	sort.SliceStable(byShare, func(i, j int) bool { return byShare[i].Share > byShare[j].Share })
	var bytes int64
	covered := 0.0
	for _, m := range byShare {
		if covered >= quantile*total {
			break
		}
		covered += m.Share
		size := m.Profile.ModelSizeBytes
		if size <= 0 {
			size = m.Profile.MemoryBytes
		}
		bytes += min(size, room)
	}
	return int((bytes + room - 1) / room)
}

// MixSlice is a slice of sm % and batch b serving mix. A replica handed b
// requests of the mix computes one batch per model among them (a batch is
// of one model), so b requests cost, on average, over the models m of
// share p: P(m among them) = 1 - (1-p)^b times m's latency at the batch
// it gets, b p / P(m among them), rounded up to a batch m's profile
// measured (a GPU runs a batch of 3 as the next batch it was built for).
// Its throughput is b over that (loads are in the demand: MixDemand). A popular model fills its batches, and many
// rare ones cost a small batch each: a mix of many models is slower per
// request than its models' mean latency. ok is false where a model of the
// mix is not profiled at that slice or could not carry load within the
// SLO there on its own at the batch it gets (QueueCapacity 0: a request
// for it would miss however light the load), so the menu holds only
// slices every model of the mix can use: a rare heavy model, which gets
// small batches, does not hold its popular light ones to batch 1.
func MixSlice(mix Mix, sm, batch int, slo time.Duration) (SliceConfig, bool) {
	total := 0.0
	for _, m := range mix.Models {
		if m.Share > 0 && m.Profile != nil {
			total += m.Share
		}
	}
	if total <= 0 || batch <= 0 {
		return SliceConfig{}, false
	}
	lat, ok := 0.0, true
	for _, m := range mix.Models {
		if m.Share <= 0 || m.Profile == nil {
			continue
		}
		p := m.Share / total
		present := -math.Expm1(float64(batch) * math.Log1p(-min(p, 1)))
		if p >= 1 {
			present = 1
		}
		k := measuredBatch(m.Profile, int(math.Ceil(float64(batch)*p/present-1e-9)), batch)
		l, err := LatencyAt(m.Profile, k, float64(sm))
		if err != nil || l <= 0 {
			ok = false
			continue
		}
		own := SliceConfig{SMPercent: sm, Batch: k, Throughput: float64(k) * 1000 / l}
		if slo > 0 && QueueCapacity(own, slo, DefaultSLOQuantile) <= 0 {
			ok = false
		}
		lat += present * l / 1000
	}
	L := lat
	if L <= 0 {
		return SliceConfig{}, false
	}
	c := SliceConfig{SMPercent: sm, Batch: batch, Throughput: float64(batch) / L}
	if slo > 0 && QueueCapacity(c, slo, DefaultSLOQuantile) <= 0 {
		ok = false
	}
	return c, ok
}

// measuredBatch is the smallest batch of at least k (and at most most)
// that p measured at full quota, else most: the batch a replica runs k
// requests as.
func measuredBatch(p *profiles.Profile, k, most int) int {
	b := most
	for _, pt := range p.Points {
		if pt.Quota == profiles.FullQuota && pt.Batch >= k && pt.Batch < b {
			b = pt.Batch
		}
	}
	return b
}

// MixConfigs is a multi-model function's autoscaler menu: every (SM %,
// batch) slice measured at full quota for the mix's largest share (of
// batch ≤ maxBatch when set) that MixSlice admits, smallest SM % first.
// Empty when no model has a share or no slice serves every model within
// the SLO.
func MixConfigs(mix Mix, slo time.Duration, maxBatch int) []SliceConfig {
	var lead *profiles.Profile
	most := 0.0
	for _, m := range mix.Models {
		if m.Profile != nil && m.Share > most {
			lead, most = m.Profile, m.Share
		}
	}
	if lead == nil {
		return nil
	}
	seen := map[[2]int]bool{}
	var out []SliceConfig
	for _, pt := range lead.Points {
		k := [2]int{pt.SM, pt.Batch}
		if pt.Quota != profiles.FullQuota || (maxBatch > 0 && pt.Batch > maxBatch) || seen[k] {
			continue
		}
		seen[k] = true
		if c, ok := MixSlice(mix, pt.SM, pt.Batch, slo); ok {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].SMPercent != out[j].SMPercent {
			return out[i].SMPercent < out[j].SMPercent
		}
		return out[i].Batch < out[j].Batch
	})
	return out
}

// CacheFillTime is how long a new replica of a multi-model function takes
// to load, one after another, the models of its mix that fill room bytes
// of it, the most requested first, beyond first: the model its start-up
// loads (the function's own), which takes its room already. It is what
// capacity started ahead of a burst needs beyond its start-up before it
// serves the burst's mix as the warm model caches it stands for did. A
// model larger than the room left is passed over, as PlaceModels passes
// it. Pure: models is not changed.
func CacheFillTime(models []ModelShare, first *profiles.Profile, room int64) time.Duration {
	ms := make([]ModelShare, 0, len(models))
	for _, m := range models {
		if m.Profile != nil && m.Share > 0 && (first == nil || m.Profile.Model != first.Model) {
			ms = append(ms, m)
		}
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].Share > ms[j].Share })
	var used int64
	if first != nil {
		used = first.ModelSizeBytes
	}
	var fill time.Duration
	for _, m := range ms {
		if used+m.Profile.ModelSizeBytes > room {
			continue
		}
		used += m.Profile.ModelSizeBytes
		fill += m.Profile.LoadTime
	}
	return fill
}
