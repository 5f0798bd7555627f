package handlers

import (
	"context"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/gorilla/mux"
	"go.uber.org/zap"
)

// ReplicaResolver lists a function's ready replicas; an unknown function is
// an error wrapping fs.ErrNotExist.
type ReplicaResolver interface {
	// Route is the one lookup of a request: the function's ready
	// replicas, its SLO and its model, from a snapshot the backend keeps
	// up to date, so that an invocation never waits behind a report, a
	// disk write or a decision. model is the request's X-Model ("": the
	// function's own), for a backend that counts cache outcomes per
	// request. It counts no load: the proxy does (LoadBook).
	Route(namespace, name, model string) (scheduler.Route, error)
	// Replicas lists the ready replicas again, for the dispatcher.
	Replicas(namespace, name string) ([]scheduler.Endpoint, error)
	// Holds reports whether a replica has model in memory.
	Holds(replicaID, model string) bool
}

// ModelLoadTimer is a ReplicaResolver that knows how long loading a model
// takes (its profile): a request for a model then waits for the model's
// busy holders only while they would serve it sooner than a load
// elsewhere, and within half its SLO (scheduler.PullView.LoadSeconds),
// rather than by a fixed count (-locality-bound).
type ModelLoadTimer interface {
	// ModelLoadSeconds is model's profiled load time; 0 when unknown.
	ModelLoadSeconds(model string) float64
}

// HeaderCache is set by replicas that know whether the request's model was
// in their memory: hit, node-hit or miss.
const HeaderCache = "X-Faas-Gpu-Cache"

// HeaderModel names the model a request is for, for functions that serve
// many models.
const HeaderModel = "X-Model"

// Router chooses among ready replicas.
type Router int

const (
	// RouteLocality applies LALB's model rules to X-Model requests: a
	// replica holding the model takes it, a request may wait for a busy
	// holder up to the locality bound (scheduler.Pull).
	RouteLocality Router = iota
	// RouteLeastOutstanding ignores models: every request goes by
	// expected completion alone.
	RouteLeastOutstanding
)

// ProxyOptions tune the invocation proxy.
type ProxyOptions struct {
	// Timeout bounds one invocation (read_timeout).
	Timeout time.Duration
	Router  Router
	// LocalityBound is the queue length at which a replica holding the
	// model stops being preferred.
	LocalityBound int64
	// InOrder turns off out-of-order dispatch of queued multi-model
	// requests (for comparison: LALB without O3).
	InOrder bool
	// QueueMax is how many requests of one function may wait in the
	// proxy for a replica that can start them (serve's -queue-max); one
	// more is answered 429 with Retry-After. 0: no bound.
	QueueMax int
	// Metrics, when set, count invocations, time them and count the ones
	// that miss their function's SLO.
	Metrics *ProxyMetrics
	// Load, when set, is where the proxy counts each function's requests
	// and queue for the backends' autoscalers; nil: a book of its own.
	Load *LoadBook
	// Models, when set, is told what replicas say they hold
	// (docs/replica-protocol.md); nil: the resolver, where it is a
	// ModelReporter.
	Models ModelReporter
}

// finished records one invocation's outcome: in the metrics, and for a
// function with an SLO in the load book's SLO counts, which the
// autoscaler corrects its model with (lifecycle.Load.SLOServed).
func finished(opts ProxyOptions, ns, name string, code int, cache string, d, slo time.Duration) {
	opts.Metrics.observe(ns, name, code, cache, d, slo)
	if slo > 0 {
		opts.Load.Completed(ns, name, sloMissed(code, d, slo))
	}
}

// HeaderReplica names the replica that served a request, so clients and
// tests can see the routing.
const HeaderReplica = "X-Faas-Gpu-Replica"

const internalHeader = "X-OpenFaaS-Internal"

type proxyTarget struct {
	url      *url.URL
	path     string
	endpoint scheduler.Endpoint
	ns, name string
	start    time.Time
	slo      time.Duration // 0: none
	model    string        // the request's X-Model, "" for none
}

type proxyTargetKey struct{}

// MakeProxyHandler serves /function/{name}[.{namespace}][/{params}]. It is
// faas-gpu's own reverse proxy rather than faas-provider's: it streams
// bodies both ways, holds each function's requests until a replica can
// start one (pull dispatch, see dispatcher), and gives long GPU jobs the
// whole timeout instead of 10 s.
func MakeProxyHandler(resolver ReplicaResolver, inv *Invocations, opts ProxyOptions, log *zap.Logger) http.HandlerFunc {
	timeout := opts.Timeout
	if opts.LocalityBound <= 0 {
		opts.LocalityBound = 2
	}
	if opts.Load == nil {
		opts.Load = NewLoadBook()
	}
	pull := newDispatcher(resolver, opts.Load, opts.Metrics, opts.Router == RouteLocality, int(opts.LocalityBound), !opts.InOrder, opts.QueueMax)
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}
	if opts.Models == nil {
		opts.Models, _ = resolver.(ModelReporter)
	}
	var asker *modelAsker
	if opts.Models != nil {
		asker = newModelAsker(opts.Models, transport, log)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(proxyTargetKey{}).(*proxyTarget)
			pr.Out.URL.Scheme = t.url.Scheme
			pr.Out.URL.Host = t.url.Host
			pr.Out.URL.Path = t.path
			pr.Out.URL.RawPath = ""
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			pr.SetXForwarded()
		},
		Transport:  transport,
		BufferPool: &bufferPool{},
		ModifyResponse: func(resp *http.Response) error {
			t := resp.Request.Context().Value(proxyTargetKey{}).(*proxyTarget)
			if resp.Header.Get(HeaderReplica) == "" {
				resp.Header.Set(HeaderReplica, t.endpoint.ID)
			}
			// The replica's word on what it holds is for the provider,
			// not the caller.
			if told, ok := resp.Header[HeaderModels]; ok {
				resp.Header.Del(HeaderModels)
				if asker != nil {
					models := ParseModelsHeader(strings.Join(told, ","))
					asker.toldNow(t.endpoint, models)
					opts.Models.ReplicaModels(t.endpoint.ID, models)
				}
			} else if asker != nil && t.model != "" {
				asker.untold(t.endpoint)
			}
			cache := resp.Header.Get(HeaderCache)
			if cache == "miss" || cache == "node-hit" {
				opts.Load.Loaded(t.ns, t.name)
			}
			finished(opts, t.ns, t.name, resp.StatusCode, cache, time.Since(t.start), t.slo)
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(proxyTargetKey{}).(*proxyTarget)
			w.Header().Set(internalHeader, "proxy")
			code := http.StatusBadGateway
			msg := "Can't reach service for: " + t.endpoint.ID + "."
			if errors.Is(err, context.DeadlineExceeded) {
				code, msg = http.StatusGatewayTimeout, "Function timed out after "+timeout.String()+"."
			} else if errors.Is(err, context.Canceled) {
				return // the client went away; nobody reads an answer
			}
			log.Warn("proxy error", zap.String("replica", t.endpoint.ID), zap.Error(err))
			finished(opts, t.ns, t.name, code, "", time.Since(t.start), t.slo)
			http.Error(w, msg, code)
		},
	}
	return func(w http.ResponseWriter, r *http.Request) {
		// From here, as the duration metric says: a request queued for a
		// replica holding its model waits against its SLO too.
		start := time.Now()
		vars := mux.Vars(r)
		name, ns := splitFunctionName(vars["name"])
		if ns == "" {
			ns = DefaultNamespace
		}
		if name == "" {
			w.Header().Set(internalHeader, "proxy")
			http.Error(w, "Provide function name in the request path", http.StatusBadRequest)
			return
		}
		route, err := resolver.Route(ns, name, r.Header.Get(HeaderModel))
		if err != nil {
			w.Header().Set(internalHeader, "proxy")
			if errors.Is(err, fs.ErrNotExist) {
				http.Error(w, "function "+name+"."+ns+" not found", http.StatusNotFound)
				return
			}
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		opts.Load.Request(ns, name, start)
		if model := r.Header.Get(HeaderModel); model != "" {
			opts.Load.RequestModel(ns, name, model)
		}
		eps := route.Endpoints
		if asker != nil {
			asker.ready(eps)
		}
		if len(eps) == 0 {
			w.Header().Set(internalHeader, "proxy")
			http.Error(w, "No endpoints available for: "+name+"."+ns+".", http.StatusServiceUnavailable)
			return
		}
		slo := route.SLO
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		q := pull.queueOf(ns, name)
		ep, err := pull.acquire(ctx, q, r.Header.Get(HeaderModel), slo, eps, start)
		if err != nil {
			w.Header().Set(internalHeader, "proxy")
			if full, ok := asQueueFull(err); ok {
				finished(opts, ns, name, http.StatusTooManyRequests, "", time.Since(start), slo)
				w.Header().Set("Retry-After", strconv.Itoa(int(full.retryAfter/time.Second)))
				http.Error(w, "Too many requests waiting for "+name+"."+ns+".", http.StatusTooManyRequests)
				return
			}
			if r.Context().Err() != nil {
				return // the client went away; nobody reads an answer
			}
			// The client waited out its timeout for a replica that
			// could start it: the worst miss of an SLO there is, so it
			// counts.
			finished(opts, ns, name, http.StatusGatewayTimeout, "", time.Since(start), slo)
			http.Error(w, "Function timed out waiting for a replica.", http.StatusGatewayTimeout)
			return
		}
		defer pull.release(q, ep)
		base, err := url.Parse(ep.URL)
		if err != nil {
			http.Error(w, "bad replica URL: "+err.Error(), http.StatusInternalServerError)
			return
		}
		path := strings.TrimSuffix(base.Path, "/") + "/" + vars["params"]
		ctx = context.WithValue(ctx, proxyTargetKey{}, &proxyTarget{url: base, path: path, endpoint: ep, ns: ns, name: name, start: start, slo: slo, model: r.Header.Get(HeaderModel)})
		inv.Add(ns, name)
		rp.ServeHTTP(w, r.WithContext(ctx))
	}
}

// bufferPool reuses the proxy's copy buffers instead of allocating 32 KiB
// per invocation.
type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[]byte); ok {
		return *b
	}
	return make([]byte, 32<<10)
}

func (p *bufferPool) Put(b []byte) { p.pool.Put(&b) }
