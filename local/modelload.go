package local

import (
	"time"

	"github.com/faas-gpu/faas-gpu/internal/modelload"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"go.uber.org/zap"
)

// loadModelLocked asks a replica to load a model in its idle time
// (lifecycle.LoadModel, docs/replica-protocol.md "POST /_/models"). The
// replica answers once the model is in, so the ask runs beside
// everything else; its answer is the replica's list, which the cache takes
// as it takes a report, the model counted at its profiled size. A replica
// that does not take loads is not asked again; one that fails is asked
// again by the core once the load's deadline passes. Close ends the asks.
func (b *Backend) loadModelLocked(e lifecycle.Effect) {
	r := b.running[e.Replica.ID]
	if r == nil || b.closed || r.takesNoLoads.Load() {
		return
	}
	url, id, model, bytes := r.run.URL(), r.id, e.Model, e.ModelBytes
	b.stopping.Add(1)
	go func() {
		defer b.stopping.Done()
		a := modelload.Ask(b.closing, url, model, b.stats, b.log, zap.String("replica", id))
		if a.NotSpoken {
			r.takesNoLoads.Store(true)
		}
		if !a.Loaded {
			return
		}
		now := time.Now()
		b.cache.Fill(id, model, bytes, now) // its size; the list below has names only
		b.cache.Report(id, a.List.Models, now)
		if len(a.List.LoadSeconds) > 0 {
			r.modelLoads.Store(&a.List.LoadSeconds)
		}
	}()
}

// ModelLoadSeconds is model's profiled load time
// (handlers.ModelLoadTimer); 0 when unknown.
func (b *Backend) ModelLoadSeconds(model string) float64 {
	return b.cfg.Profiles.LoadSeconds(model, b.product)
}
