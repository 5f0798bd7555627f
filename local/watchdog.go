package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Watchdog is of-watchdog's part, which the provider plays in local mode:
// the settings a template's Dockerfile and the function's env give it.
type Watchdog struct {
	// Mode is http, streaming, serializing or static; classic (no mode
	// set) is the classic watchdog, a fork per request.
	Mode        string
	UpstreamURL string // http mode: where the function's server listens
	ExecTimeout time.Duration
	MaxInflight int // 0: no limit
	ContentType string
	PrefixLogs  bool
	BufferHTTP  bool
	// ReadyPath is com.openfaas.ready.http.path: ready once it answers 2xx.
	// Empty: /_/health of the upstream, else a TCP connect.
	ReadyPath  string
	StaticPath string
	// Build is the function's build folder; nil when it has none.
	Build     *buildFolder
	Templates *Templates
}

// watchdogKeys are the env settings that make a function's replica run
// behind the provider's watchdog even without a build folder.
var watchdogKeys = []string{"upstream_url", "exec_timeout", "max_inflight", "content_type", "prefix_logs", "buffer_http"}

// wantsWatchdog says whether a function without a build folder uses
// watchdog settings; without them it runs as before (mode=http with a
// port handed out, or the classic watchdog).
func wantsWatchdog(env map[string]string) bool {
	switch env["mode"] {
	case "streaming", "serializing", "static":
		return true
	}
	for _, k := range watchdogKeys {
		if _, ok := env[k]; ok {
			return true
		}
	}
	return false
}

// parseWatchdog reads of-watchdog's settings from env, as of-watchdog
// reads them: exec_timeout is seconds or a Go duration, the booleans are
// "true"/"false".
func parseWatchdog(env map[string]string, readyPath string) (Watchdog, error) {
	w := Watchdog{Mode: env["mode"], UpstreamURL: env["upstream_url"], ContentType: env["content_type"], PrefixLogs: true,
		ReadyPath: readyPath, StaticPath: env["static_path"]}
	switch w.Mode {
	case "":
		// The Dockerfile of a classic-watchdog template sets no mode; an
		// of-watchdog one always does.
		w.Mode = "classic"
	case "http", "streaming", "serializing", "static":
	default:
		return Watchdog{}, fmt.Errorf("mode: %q is not http, streaming, serializing or static", w.Mode)
	}
	if v, ok := env["exec_timeout"]; ok && v != "" {
		d, err := parseTimeout(v)
		if err != nil {
			return Watchdog{}, fmt.Errorf("exec_timeout: %q is not seconds or a duration", v)
		}
		w.ExecTimeout = d
	}
	if v, ok := env["max_inflight"]; ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return Watchdog{}, fmt.Errorf("max_inflight: %q is not a whole number", v)
		}
		w.MaxInflight = n
	}
	for name, dst := range map[string]*bool{"prefix_logs": &w.PrefixLogs, "buffer_http": &w.BufferHTTP} {
		if v, ok := env[name]; ok && v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Watchdog{}, fmt.Errorf("%s: %q is not true or false", name, v)
			}
			*dst = b
		}
	}
	if w.Mode == "http" && w.UpstreamURL != "" {
		if _, err := upstreamPort(w.UpstreamURL); err != nil {
			return Watchdog{}, err
		}
	}
	if w.StaticPath == "" {
		w.StaticPath = "/home/app/public" // of-watchdog's default
	}
	return w, nil
}

// parseTimeout reads whole seconds ("10") or a Go duration ("1.5s"),
// as of-watchdog does; sub-second durations keep their precision.
func parseTimeout(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0, errors.New("negative")
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, errors.New("not a duration")
	}
	return d, nil
}

// upstreamPort is the fixed loopback port of an upstream_url.
func upstreamPort(raw string) (int, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Port() == "" {
		return 0, fmt.Errorf("upstream_url: %q is not http://127.0.0.1:PORT", raw)
	}
	switch u.Hostname() {
	case "127.0.0.1", "localhost", "0.0.0.0", "::1":
	default:
		return 0, fmt.Errorf("upstream_url: %q: the function's server must be on this replica's loopback", raw)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil || p <= 0 || p > 65535 {
		return 0, fmt.Errorf("upstream_url: %q has no valid port", raw)
	}
	return p, nil
}

// watchdogRunner answers a replica's requests as of-watchdog would, in
// front of the function: its own loopback server applies max_inflight,
// exec_timeout, buffer_http and content_type and forwards to the
// function's server (http), or forks it per request (streaming,
// serializing), or serves files (static). Dependencies are installed, and
// a fixed upstream port given its own network namespace, in the
// background after Start.
type watchdogRunner struct {
	spec ReplicaSpec
	wd   Watchdog
	sink LogSink
	log  *zap.Logger
	srv  loopbackServer
	// slots admits MaxInflight requests at once; nil without a limit.
	slots chan struct{}

	ctx    context.Context // ends at Stop: a pending install or port wait gives up
	cancel context.CancelFunc
	done   chan struct{} // closed when the background start has finished

	mu      sync.Mutex
	stopped bool
	inner   runner // the function, once it could be started
	handler http.Handler
	ns      *netNS
	port    int // fixed port held without a namespace; 0 none
}

func newWatchdogRunner(spec ReplicaSpec, sink LogSink, log *zap.Logger) *watchdogRunner {
	ctx, cancel := context.WithCancel(context.Background())
	r := &watchdogRunner{spec: spec, wd: *spec.Watchdog, sink: sink, log: log, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if r.wd.MaxInflight > 0 {
		r.slots = make(chan struct{}, r.wd.MaxInflight)
	}
	return r
}

func (r *watchdogRunner) Start() error {
	if r.wd.Mode != "static" && strings.TrimSpace(r.spec.Process) == "" {
		return fmt.Errorf("start %s: no fprocess: set it in stack.yml, or ENV fprocess in the Dockerfile", r.spec.ID)
	}
	if err := r.srv.start(r.spec.ID, http.HandlerFunc(r.serve), r.log); err != nil {
		return err
	}
	r.log.Info("replica watchdog started", zap.String("replica", r.spec.ID), zap.String("function", r.spec.Function),
		zap.String("watchdogMode", r.wd.Mode), zap.String("upstream", r.wd.UpstreamURL), zap.String("url", r.srv.URL()))
	go r.background()
	return nil
}

func (r *watchdogRunner) URL() string { return r.srv.URL() }

// Unready is why the function behind the watchdog is not ready, as its
// readiness path says; "".
func (r *watchdogRunner) Unready() string {
	r.mu.Lock()
	inner := r.inner
	r.mu.Unlock()
	if u, ok := inner.(interface{ Unready() string }); ok {
		return u.Unready()
	}
	return ""
}

func (r *watchdogRunner) Ready() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.handler == nil || !r.srv.Ready() {
		return false
	}
	return r.inner == nil || r.inner.Ready()
}

// background installs dependencies and starts the function.
func (r *watchdogRunner) background() {
	defer close(r.done)
	if err := r.launch(); err != nil {
		if r.ctx.Err() != nil {
			return // stopped meanwhile
		}
		r.log.Error("replica not started", zap.String("replica", r.spec.ID), zap.String("function", r.spec.Function), zap.Error(err))
		r.sink(r.spec.ID, "not started: "+err.Error())
	}
}

func (r *watchdogRunner) launch() error {
	spec := r.spec
	spec.Watchdog = nil
	if b := r.wd.Build; b != nil {
		spec.WorkDir = b.Dir
		d, err := r.wd.Templates.prepare(r.ctx, spec.Namespace, spec.Function, *b, func(line string) {
			if strings.TrimSpace(line) != "" {
				r.sink(spec.ID, "build: "+line)
			}
		})
		if err != nil {
			return err
		}
		spec.Env = append(append([]string(nil), spec.Env...), d.Env...)
	}
	switch r.wd.Mode {
	case "static":
		dir := r.wd.StaticPath
		if r.wd.Build != nil {
			dir = r.wd.Build.hostPath(dir)
		}
		return r.install(nil, http.FileServer(http.Dir(dir)))
	case "classic", "streaming", "serializing":
		c := newClassicRunner(spec, r.sink, r.log).(*classicRunner)
		c.stream, c.contentType = r.wd.Mode == "streaming", r.wd.ContentType
		if err := c.Start(); err != nil {
			return err
		}
		return r.install(c, r.forward(c.URL(), nil))
	}
	p := newProcessRunner(spec, r.sink, r.log).(*processRunner)
	p.prefixLogs = r.wd.PrefixLogs
	p.probePath, p.probeStrict = "/_/health", false
	if r.wd.ReadyPath != "" {
		p.probePath, p.probeStrict = r.wd.ReadyPath, true
	}
	var dial func(ctx context.Context, network, addr string) (net.Conn, error)
	if r.wd.UpstreamURL != "" {
		port, _ := upstreamPort(r.wd.UpstreamURL) // checked by parseWatchdog
		p.fixedPort = port
		ns, err := r.wd.Templates.newNetNS()
		if err != nil {
			// One replica per fixed port, then: the others wait for it.
			reason := fmt.Sprintf("pending: upstream port %d is fixed and no network namespace can be made (%v)", port, err)
			if err := r.wd.Templates.acquirePort(r.ctx, port, spec.ID, reason, func(holder string) {
				r.sink(spec.ID, reason+"; replica "+holder+" holds the port")
				r.log.Warn("replica pending", zap.String("replica", spec.ID), zap.Int("port", port), zap.String("holder", holder), zap.String("reason", reason))
			}); err != nil {
				return err
			}
			r.mu.Lock()
			r.port = port
			r.mu.Unlock()
		} else {
			r.mu.Lock()
			r.ns = ns
			r.mu.Unlock()
			p.startIn, p.dial, dial = ns.run, ns.dial, ns.dial
			r.log.Info("replica in its own network namespace", zap.String("replica", spec.ID), zap.Int("port", port), zap.Uint64("netns", ns.inode()))
		}
	}
	if err := p.Start(); err != nil {
		return err
	}
	return r.install(p, r.forward(p.URL(), dial))
}

// install makes inner the replica's function, unless it was stopped
// meanwhile; then inner is stopped here.
func (r *watchdogRunner) install(inner runner, h http.Handler) error {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		if inner != nil {
			_ = inner.Stop(context.Background())
		}
		return context.Canceled
	}
	r.inner, r.handler = inner, h
	r.mu.Unlock()
	return nil
}

// forward proxies to the function's server; dial reaches into its
// namespace when it has one.
func (r *watchdogRunner) forward(raw string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) http.Handler {
	u, _ := url.Parse(raw)
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}
	if dial != nil {
		tr.DialContext = dial
	}
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Host = pr.In.Host
		},
		Transport:     tr,
		FlushInterval: -1, // streamed answers go out as they come
		ErrorHandler: func(w http.ResponseWriter, req *http.Request, err error) {
			if errors.Is(req.Context().Err(), context.DeadlineExceeded) {
				http.Error(w, fmt.Sprintf("exec_timeout of %s exceeded", r.wd.ExecTimeout), http.StatusGatewayTimeout)
				return
			}
			http.Error(w, "function unreachable: "+err.Error(), http.StatusBadGateway)
		},
		ModifyResponse: func(resp *http.Response) error {
			if r.wd.ContentType != "" && resp.Header.Get("Content-Type") == "" {
				resp.Header.Set("Content-Type", r.wd.ContentType)
			}
			return nil
		},
	}
}

func (r *watchdogRunner) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	h := r.handler
	r.mu.Unlock()
	if h == nil {
		http.Error(w, "replica not ready", http.StatusServiceUnavailable)
		return
	}
	if r.slots != nil {
		select {
		case r.slots <- struct{}{}:
			defer func() { <-r.slots }()
		default:
			http.Error(w, fmt.Sprintf("max_inflight of %d reached", r.wd.MaxInflight), http.StatusTooManyRequests)
			return
		}
	}
	if r.wd.ExecTimeout > 0 {
		ctx, cancel := context.WithTimeout(req.Context(), r.wd.ExecTimeout)
		defer cancel()
		req = req.WithContext(ctx)
	}
	if r.wd.BufferHTTP && req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		req.Header.Del("Transfer-Encoding")
	}
	h.ServeHTTP(w, req)
}

// Stop ends the background start, the front server, the function, and
// lets its namespace or port go.
func (r *watchdogRunner) Stop(ctx context.Context) error {
	r.mu.Lock()
	r.stopped = true
	r.mu.Unlock()
	r.cancel()
	<-r.done
	if r.srv.stop(ctx) {
		r.log.Warn("replica stopped with requests in flight", zap.String("replica", r.spec.ID))
	}
	r.mu.Lock()
	inner, ns, port := r.inner, r.ns, r.port
	r.inner, r.ns, r.port = nil, nil, 0
	r.mu.Unlock()
	var err error
	if inner != nil {
		err = inner.Stop(ctx)
	}
	if ns != nil {
		ns.Close()
	}
	if port != 0 {
		r.wd.Templates.releasePort(port, r.spec.ID)
	}
	return err
}

// acquirePort holds a fixed port for replica id, waiting while another
// replica holds it; waiting is told the holder once, and Waiting says why
// the replica waits (reason) meanwhile.
func (t *Templates) acquirePort(ctx context.Context, port int, id, reason string, waiting func(holder string)) error {
	told := false
	defer func() {
		t.mu.Lock()
		delete(t.waiting, id)
		t.mu.Unlock()
	}()
	for {
		t.mu.Lock()
		holder, taken := t.ports[port]
		if !taken || holder == id {
			t.ports[port] = id
			t.mu.Unlock()
			return nil
		}
		t.waiting[id] = strings.TrimPrefix(reason, "pending: ") + "; replica " + holder + " holds it"
		freed := t.freed
		t.mu.Unlock()
		if !told {
			waiting(holder)
			told = true
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Waiting says why replica id has not started: it waits for a fixed port
// another replica holds.
func (t *Templates) Waiting(id string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r, ok := t.waiting[id]
	return r, ok
}

func (t *Templates) releasePort(port int, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ports[port] == id {
		delete(t.ports, port)
		close(t.freed)
		t.freed = make(chan struct{})
	}
}
