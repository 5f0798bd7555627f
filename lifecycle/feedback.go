package lifecycle

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// sloMenu is a function's slices valued at the SLO its feedback plans at
// (scheduler.SLOFeedback.PlanSLO) rather than its own: each slice's
// lone-replica chain is solved once per planned SLO, not at every tick.
type sloMenu struct {
	slo    time.Duration
	valued map[scheduler.SliceConfig]valuedSlice
}

type valuedSlice struct {
	config scheduler.SliceConfig
	serves bool // it carries load within the SLO at all
}

// sloMenuMax bounds the slices an sloMenu keeps: a multi-model
// function's slices are valued afresh on its mix as the mix moves, and
// each would otherwise stay for as long as the planned SLO does.
const sloMenuMax = 256

// at is c valued at slo and quantile, and whether it carries load there.
func (m *sloMenu) at(c scheduler.SliceConfig, slo time.Duration, quantile float64) (scheduler.SliceConfig, bool) {
	if m.slo != slo || m.valued == nil || len(m.valued) >= sloMenuMax {
		m.slo, m.valued = slo, map[scheduler.SliceConfig]valuedSlice{}
	}
	key := c
	key.Lone = scheduler.LoneRate{}
	v, ok := m.valued[key]
	if !ok {
		v.config, v.serves = c.AtSLO(slo, quantile)
		m.valued[key] = v
	}
	return v.config, v.serves
}

// menuAt is configs valued at slo, without the slices that carry no load
// within it; false when none would be left: the feedback then tightens
// the rate alone, for a plan with no slice would add none.
func (m *sloMenu) menuAt(configs []scheduler.SliceConfig, slo time.Duration, quantile float64) ([]scheduler.SliceConfig, bool) {
	var out []scheduler.SliceConfig
	for _, c := range configs {
		if v, serves := m.at(c, slo, quantile); serves {
			out = append(out, v)
		}
	}
	return out, len(out) > 0
}
