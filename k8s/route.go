package k8s

import (
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
)

// LoadSource is what the proxy counted of a function (handlers.LoadBook):
// every request so far, the last one's time, and how many wait in the
// proxy for a replica now.
type LoadSource interface {
	Load(namespace, name string) (requests uint64, last time.Time, queued int)
}

// StandbyLoadSource is a LoadSource that also holds standbys' reports
// (handlers.LoadShare) and tells whether one is fresh.
type StandbyLoadSource interface {
	Reporting() bool
}

// riseAllowed tells whether the leader may run the core's short rise
// pass now: not while standbys report, since their requests reach the
// count in lumps once an -autoscale-interval and a 250-ms pass would read
// each lump as a rise (a scale-up for nothing, every report). The tick,
// over the report interval, sees them as they are.
func (b *Backend) riseAllowed() bool {
	s, ok := b.cfg.Load.(StandbyLoadSource)
	return !ok || !s.Reporting()
}

// ModelLoadSource is a LoadSource that also counts a function's requests
// by model (X-Model) and its replicas' model loads (handlers.LoadBook), so
// that a multi-model function is planned from its mix (lifecycle.Load).
// What standbys proxied reaches the leader as counts without models.
type ModelLoadSource interface {
	Models(namespace, name string) (byModel map[string]uint64, loads uint64)
}

// SLOLoadSource is a LoadSource that also counts a function's requests
// with an SLO that finished and those that missed it (handlers.LoadBook;
// this instance's proxy only: a standby's misses are not reported), for
// the autoscaler's correction of its model (lifecycle.Load.SLOServed).
type SLOLoadSource interface {
	SLO(namespace, name string) (served, missed uint64)
}

// Route is the proxy's one lookup of a request (handlers.ReplicaResolver):
// the function's Ready pods, its SLO and its model. It counts the
// request's cache outcome for model (the request's X-Model, "" for the
// function's own).
func (b *Backend) Route(ns, name, model string) (scheduler.Route, error) {
	req, err := b.functionRequest(ns, name)
	if err != nil {
		return scheduler.Route{}, err
	}
	if model == "" {
		model = req.Model
	}
	eps := b.endpoints(ns, name, req.Model)
	b.countCache(eps, model)
	return scheduler.Route{Endpoints: eps, SLO: req.SLO, Model: req.Model}, nil
}

// load is what the proxy counted of function k; zero without a proxy.
func (b *Backend) load(k string) (requests uint64, last time.Time, queued int) {
	if b.cfg.Load == nil {
		return 0, time.Time{}, 0
	}
	ns, name := splitKey(k)
	return b.cfg.Load.Load(ns, name)
}
