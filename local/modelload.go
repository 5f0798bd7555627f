package local

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/faas-gpu/faas-gpu/internal/modelload"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"go.uber.org/zap"
)

// loadClient reaches replicas on loopback for the loads the core asks of
// them; each load's own context bounds it.
var loadClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// loadModelLocked asks a replica to load a model in its idle time
// (lifecycle.LoadModel, docs/replica-protocol.md "POST /_/models"). The
// replica answers once the model is in, so the ask runs beside
// everything else; its answer is the replica's list, which the cache takes
// as it takes a report, the model counted at its profiled size. A replica
// that does not take loads is not asked again; one that fails is asked
// again by the core once the load's deadline passes.
func (b *Backend) loadModelLocked(e lifecycle.Effect) {
	r := b.running[e.Replica.ID]
	if r == nil || b.closed || r.takesNoLoads.Load() {
		return
	}
	url, id, model, bytes := r.run.URL(), r.id, e.Model, e.ModelBytes
	b.stopping.Add(1)
	go func() {
		defer b.stopping.Done()
		ctx, cancel := context.WithTimeout(context.Background(), modelload.Timeout)
		defer cancel()
		go func() {
			select {
			case <-b.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		l, err := modelload.Load(ctx, loadClient, url, model)
		b.stats.IdleLoaded(modelload.Outcome(err))
		switch {
		case errors.Is(err, modelload.ErrNotSpoken):
			r.takesNoLoads.Store(true)
			b.log.Info("replica takes no model loads in its idle time", zap.String("replica", id), zap.Error(err))
			return
		case err != nil:
			b.log.Debug("model not loaded", zap.String("replica", id), zap.String("model", model), zap.Error(err))
			return
		}
		now := time.Now()
		b.cache.Fill(id, model, bytes, now) // its size; the list below has names only
		b.cache.Report(id, l.Models, now)
		if len(l.LoadSeconds) > 0 {
			r.modelLoads.Store(&l.LoadSeconds)
		}
		b.log.Debug("model loaded in idle time", zap.String("replica", id), zap.String("model", model))
	}()
}

// ModelLoadSeconds is model's profiled load time
// (handlers.ModelLoadTimer); 0 when unknown.
func (b *Backend) ModelLoadSeconds(model string) float64 {
	if prof, _, ok := b.cfg.Profiles.Lookup(model, b.product); ok {
		return prof.LoadTime.Seconds()
	}
	return 0
}
