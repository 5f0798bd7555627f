package handlers

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/internal/modelload"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
)

// ModelReporter is told what a replica says it holds in GPU memory
// (docs/replica-protocol.md), most recently used first. The proxy calls it
// on the request path, so an implementation takes no backend lock.
type ModelReporter interface {
	ReplicaModels(replicaID string, models []string)
}

// ModelLoadReporter is told, where a ModelReporter also implements it, how
// long a replica says each model it holds took to load (the protocol's
// loadSeconds), so that /system/gpus can show a cold start's cost where it
// is paid: in the replica, not in the provider's view of it.
type ModelLoadReporter interface {
	ReplicaModelLoads(replicaID string, seconds map[string]float64)
}

// HeaderModels is the replica protocol's response header: the models the
// replica holds, names only, most recently used first. The proxy reads and
// removes it.
const HeaderModels = "X-Faas-Gpu-Models"

// ModelsPath is where a replica that speaks the protocol lists its models.
const ModelsPath = modelload.Path

// modelsAskEvery bounds how often one replica is asked after responses
// that told nothing, as the protocol says.
const modelsAskEvery = time.Second

// modelsAskTimeout bounds one ask: a replica slow to answer keeps the
// view it had.
const modelsAskTimeout = 2 * time.Second

// ParseModelsHeader reads an X-Faas-Gpu-Models value: names separated by
// commas, blanks dropped.
func ParseModelsHeader(v string) []string {
	out := []string{}
	for _, m := range strings.Split(v, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// modelAsker asks replicas what they hold: once when the proxy first sees
// one ready, then after a response that told nothing for a request that
// named a model, at most once a second per replica. Asks run in their own
// goroutines; the request path only reads an atomic per replica.
type modelAsker struct {
	reporter ModelReporter
	client   *http.Client
	log      *zap.Logger
	now      func() time.Time
	// last is when each replica was last asked (unix nanoseconds), by
	// replica ID: *atomic.Int64.
	last sync.Map
	// told is when each replica last told its models in a response's
	// header (unix nanoseconds), by replica ID: *atomic.Int64. An ask's
	// answer older than that is dropped, so it cannot undo a fresher word.
	told sync.Map
	// listed is what each replica's last answer to an ask listed, by
	// replica ID: string, the names joined by commas. A header that tells
	// another list means a load or an eviction since, whose load time
	// only an ask can learn (the header has names only).
	listed sync.Map
	// asking counts asks in flight, for tests that wait for them.
	asking sync.WaitGroup
	// seen counts replicas in last, to forget those gone once it grows.
	seen atomic.Int64
}

func newModelAsker(reporter ModelReporter, transport http.RoundTripper, log *zap.Logger) *modelAsker {
	return &modelAsker{reporter: reporter, client: &http.Client{Transport: transport, Timeout: modelsAskTimeout}, log: log, now: time.Now}
}

// forgetAbove is how many replicas the asker remembers before it forgets
// those not asked for a while: replicas come and go.
const forgetAbove = 4096

// ready asks each endpoint never asked before.
func (a *modelAsker) ready(eps []scheduler.Endpoint) {
	for _, ep := range eps {
		if _, ok := a.last.Load(ep.ID); ok {
			continue
		}
		v, loaded := a.last.LoadOrStore(ep.ID, new(atomic.Int64))
		if loaded {
			continue
		}
		if a.seen.Add(1) > forgetAbove {
			a.forget()
		}
		v.(*atomic.Int64).Store(a.now().UnixNano())
		a.ask(ep)
	}
}

// untold asks ep after a response that carried no HeaderModels for a
// request that named a model, unless it was asked within the last second.
func (a *modelAsker) untold(ep scheduler.Endpoint) {
	v, loaded := a.last.LoadOrStore(ep.ID, new(atomic.Int64))
	if !loaded && a.seen.Add(1) > forgetAbove {
		a.forget()
	}
	last := v.(*atomic.Int64)
	prev, now := last.Load(), a.now().UnixNano()
	if now-prev < int64(modelsAskEvery) || !last.CompareAndSwap(prev, now) {
		return
	}
	a.ask(ep)
}

func (a *modelAsker) forget() {
	cutoff := a.now().Add(-time.Minute).UnixNano()
	a.last.Range(func(k, v any) bool {
		if v.(*atomic.Int64).Load() < cutoff {
			a.last.Delete(k)
			a.told.Delete(k)
			a.listed.Delete(k)
			a.seen.Add(-1)
		}
		return true
	})
}

func (a *modelAsker) ask(ep scheduler.Endpoint) {
	a.asking.Add(1)
	go func() {
		defer a.asking.Done()
		began := a.now().UnixNano()
		models, loads, err := a.fetch(ep.URL)
		if err != nil {
			a.log.Debug("replica did not list its models", zap.String("replica", ep.ID), zap.Error(err))
			return
		}
		if models != nil {
			a.listed.Store(ep.ID, strings.Join(models, ","))
		}
		// Load times are the ask's alone: no header overtakes them.
		if lr, ok := a.reporter.(ModelLoadReporter); ok && len(loads) > 0 {
			lr.ReplicaModelLoads(ep.ID, loads)
		}
		if v, ok := a.told.Load(ep.ID); ok && v.(*atomic.Int64).Load() >= began {
			return // a response told newer news while the ask was out
		}
		if models != nil {
			a.reporter.ReplicaModels(ep.ID, models)
		}
	}()
}

// toldNow records that replica ep told models in a response just now. A
// list other than its last answer's, to a reporter that keeps load times,
// is asked about (at most once a second), for the load time of what it
// loaded since.
func (a *modelAsker) toldNow(ep scheduler.Endpoint, models []string) {
	v, _ := a.told.LoadOrStore(ep.ID, new(atomic.Int64))
	v.(*atomic.Int64).Store(a.now().UnixNano())
	if _, ok := a.reporter.(ModelLoadReporter); !ok {
		return
	}
	if prev, ok := a.listed.Load(ep.ID); ok && prev.(string) == strings.Join(models, ",") {
		return
	}
	a.untold(ep)
}

// fetch asks the replica at base for its models and the load times it
// gives; nil models (and no error) when it does not speak the protocol.
func (a *modelAsker) fetch(base string) ([]string, map[string]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), modelsAskTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+ModelsPath, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("models request: %w", err)
	}
	// An ask is rare and often runs beside the replica's first request: a
	// connection kept for it would stay idle beside the proxy's, about
	// 20 KiB a replica.
	req.Close = true
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("ask %s: %w", ModelsPath, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return nil, nil, nil
	}
	l, err := modelload.Decode(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return l.Models, l.LoadSeconds, nil
}
