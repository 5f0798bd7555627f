// Command faas-gpu is an OpenFaaS provider that places deep-learning
// inference functions on shared GPUs. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/handlers"
	"github.com/faas-gpu/faas-gpu/k8s"
	"github.com/faas-gpu/faas-gpu/lifecycle"
	"github.com/faas-gpu/faas-gpu/local"
	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"github.com/gorilla/mux"
	bootstrap "github.com/openfaas/faas-provider"
	"github.com/openfaas/faas-provider/auth"
	"github.com/openfaas/faas-provider/httputil"
	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Set with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

const usage = `faas-gpu: an OpenFaaS provider for deep-learning inference on shared GPUs.

Usage:
  faas-gpu [serve] [flags]   run the provider (the default verb)
  faas-gpu agent [flags]     publish this node's GPUs (NVML) on its Kubernetes Node; agent -h for its flags
  faas-gpu profile --function NAME --out FILE [flags]
                             measure a deployed function at several SM % and write its profile (docs/profiling.md)
  faas-gpu profiles import --csv FILE --gpu PRODUCT [--out DIR]
                             convert a measured latency table into profile files
  faas-gpu simulate [flags]  replay a workload against the scheduler in virtual time, policy against policy (docs/evaluation.md)
  faas-gpu version           print the version
  faas-gpu help              print this help

Environment (the OpenFaaS provider's names):
  port                TCP port of the provider API (default 8080; use 8081 beside a gateway on 8080)
  basic_auth          "true" protects /system/* with the credentials below
  secret_mount_path   folder holding basic-auth-user and basic-auth-password (default /run/secrets/)
  read_timeout        HTTP read timeout and invocation timeout, seconds or a Go duration (default 60s)
  write_timeout       HTTP write timeout, also bounds log streaming (default 60s)

Flags of serve:
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "faas-gpu:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	verb := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		verb, args = args[0], args[1:]
	}
	switch verb {
	case "serve":
		return serve(args, stderr)
	case "agent":
		return agentCmd(args, stdout, stderr)
	case "profile":
		return profileCmd(args, stdout, stderr)
	case "simulate":
		return simulateCmd(args, stdout, stderr)
	case "profiles":
		return profilesCmd(args, stdout, stderr)
	case "version":
		return versionCmd(args, stdout, stderr)
	case "help":
		fs, _ := serveFlags(stderr)
		fs.SetOutput(stdout)
		fs.Usage()
		return nil
	default:
		return fmt.Errorf("unknown verb %q; run faas-gpu help", verb)
	}
}

func versionCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "faas-gpu version: print the version and commit this binary was built from.\n\nUsage:\n  faas-gpu version\n")
	}
	if help, err := parseArgs(fs, args, "version"); help || err != nil {
		return err
	}
	fmt.Fprintf(stdout, "faas-gpu %s (%s)\n", version, commit)
	return nil
}

type serveOptions struct {
	profilesDir      string
	router           string
	localityBound    int64
	queueMax         int
	tick             time.Duration
	rise             time.Duration
	warmTTL          time.Duration
	consolidate      bool
	standby          bool
	headroom         float64
	queueing         bool
	coolDown         time.Duration
	stateDir         string
	buildDir         string
	inventory        string
	nodeName         string
	mpsPipeDir       string
	emulatedLatency  time.Duration
	emulatedLoadTime time.Duration
	logLevel         zapcore.Level
	logFormat        string
	kubeconfig       string
	k8s              *k8s.Options
}

func defaultStateDir() string {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "faas-gpu")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "state", "faas-gpu")
	}
	return filepath.Join(os.TempDir(), "faas-gpu")
}

func serveFlags(stderr io.Writer) (*flag.FlagSet, *serveOptions) {
	o := &serveOptions{logLevel: zapcore.InfoLevel}
	host, _ := os.Hostname()
	if host == "" {
		host = "local"
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "run on Kubernetes with this kubeconfig (also $KUBECONFIG; in a pod the in-cluster account); otherwise local mode")
	o.k8s = k8s.AddFlags(fs)
	fs.StringVar(&o.stateDir, "state-dir", defaultStateDir(), "folder where functions, secrets and placements are kept across restarts")
	fs.StringVar(&o.buildDir, "build-dir", "build", "folder of template build folders, build/<function> as `faas-cli build --shrinkwrap` writes them (local mode)")
	fs.StringVar(&o.inventory, "inventory", "", "GPU inventory YAML (docs/inventory.md); empty: NVML when present, else a built-in server with two emulated V100s")
	fs.StringVar(&o.nodeName, "node-name", host, "node name of this machine's GPUs")
	fs.StringVar(&o.mpsPipeDir, "mps-pipe-dir", "/tmp/nvidia-mps", "CUDA_MPS_PIPE_DIRECTORY given to replicas")
	fs.DurationVar(&o.emulatedLatency, "emulated-latency", 20*time.Millisecond, "latency of an emulated replica's request (ResNet-50 on a whole V100 is about 20 ms)")
	fs.DurationVar(&o.emulatedLoadTime, "emulated-load-time", time.Second, "model load time an emulated replica pays on its first request")
	fs.StringVar(&o.profilesDir, "profiles", "", "folder of extra profile files (docs/profiles.md); they override the built-in V100 profiles")
	fs.StringVar(&o.router, "router", "locality", "request routing: locality (prefer replicas holding the model) or least-outstanding")
	fs.Int64Var(&o.localityBound, "locality-bound", 2, "requests in flight at which a replica holding the model stops being preferred")
	fs.IntVar(&o.queueMax, "queue-max", 1000, "requests of one function that may wait in the proxy for a replica that can start them; one more is answered 429 with Retry-After (0: no bound)")
	fs.DurationVar(&o.tick, "autoscale-interval", time.Second, "how often the autoscaler runs")
	fs.DurationVar(&o.rise, "rise-interval", lifecycle.DefaultRise, "how often, between the autoscaler's runs, a rising rate is looked for and answered with replicas (at or above -autoscale-interval: never)")
	fs.Float64Var(&o.headroom, "autoscale-headroom", scheduler.DefaultAutoscaleOptions.Headroom, "capacity the autoscaler keeps above the observed rate (1.2 = 20 % spare)")
	fs.BoolVar(&o.queueing, "autoscale-queueing", true, "plan functions with an SLO against each replica's queueing capacity at the SLO's p99 and resize replicas to their load; false: the rate plus headroom over full-batch throughput, no resizing (docs/scheduling.md)")
	fs.DurationVar(&o.coolDown, "autoscale-cooldown", scheduler.DefaultAutoscaleOptions.CoolDown, "quiet time after scaling before replicas are removed")
	fs.DurationVar(&o.warmTTL, "warm-ttl", 10*time.Minute, "the longest a scaled-down replica keeps its model in GPU memory (shorter for a function idle beyond its usual gaps or a crowded GPU: docs/scheduling.md)")
	fs.BoolVar(&o.consolidate, "consolidate", true, "move replicas, make before break, to free a GPU whose replicas fit on the others (docs/scheduling.md §7)")
	fs.BoolVar(&o.standby, "standby", true, "keep a standby replica of each function with an SLO, loaded and out of service, in GPU memory no placement needs, for its next rise (docs/scheduling.md §3a)")
	fs.Var(&o.logLevel, "log-level", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "console or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	return fs, o
}

func newLogger(o *serveOptions) (*zap.Logger, error) {
	var cfg zap.Config
	switch o.logFormat {
	case "json":
		cfg = zap.NewProductionConfig()
	case "console":
		cfg = zap.NewDevelopmentConfig()
		cfg.DisableStacktrace = true
	default:
		return nil, fmt.Errorf("-log-format: %q is not console or json", o.logFormat)
	}
	cfg.Level = zap.NewAtomicLevelAt(o.logLevel)
	return cfg.Build()
}

// providerConfig reads the OpenFaaS variables. Unlike faas-provider's 10 s
// default, timeouts default to 60 s like the gateway's, because GPU
// inference with a model load often takes longer than 10 s.
func providerConfig() (types.FaaSConfig, error) {
	cfg, err := types.ReadConfig{}.Read(types.OsEnv{})
	if err != nil {
		return types.FaaSConfig{}, fmt.Errorf("read configuration: %w", err)
	}
	for name, d := range map[string]*time.Duration{"read_timeout": &cfg.ReadTimeout, "write_timeout": &cfg.WriteTimeout} {
		v, ok := os.LookupEnv(name)
		if !ok {
			*d = 60 * time.Second
			continue
		}
		if _, err := types.ParseIntOrDuration(v); err != nil {
			return types.FaaSConfig{}, fmt.Errorf("%s: %q is not seconds or a duration", name, v)
		}
	}
	if v, ok := os.LookupEnv("port"); ok {
		if p, err := net.LookupPort("tcp", v); err != nil || p == 0 {
			return types.FaaSConfig{}, fmt.Errorf("port: %q is not a TCP port", v)
		}
	}
	return *cfg, nil
}

func loadInventory(o *serveOptions, log *zap.Logger) (gpu.Inventory, error) {
	if o.inventory != "" {
		inv, err := gpu.LoadInventoryFile(o.inventory)
		if err != nil {
			return gpu.Inventory{}, err
		}
		log.Info("GPU inventory from file", zap.String("file", o.inventory), zap.Int("gpus", len(inv.Devices())))
		return inv, nil
	}
	// No file: this machine's GPUs through NVML when the driver is there.
	// A machine without one still gets a realistic scheduler from the
	// built-in server; a driver that is there but fails is reported, not
	// papered over with emulated GPUs.
	inv, err := gpu.NewNVML(o.nodeName, "").Discover()
	switch {
	case err == nil && len(inv.Devices()) > 0:
		log.Info("GPU inventory from NVML", zap.String("node", o.nodeName), zap.Int("gpus", len(inv.Devices())),
			zap.String("product", inv.Devices()[0].Product))
		return inv, nil
	case err == nil:
		log.Warn("NVML found no GPU MPS can share (none, or all in MIG mode): emulating one server with two GPUs instead")
	case errors.Is(err, gpu.ErrNoDiscovery):
		log.Debug("NVML unavailable", zap.Error(err))
	default:
		return gpu.Inventory{}, fmt.Errorf("GPU discovery with NVML failed (describe the GPUs with -inventory instead): %w", err)
	}
	inv = gpu.BuiltinInventory(o.nodeName)
	log.Warn("no NVML and no -inventory: emulating one server with two GPUs; replicas of image-only functions are emulated workers",
		zap.String("product", gpu.V100Product), zap.Int("gpus", len(inv.Devices())))
	return inv, nil
}

// parseArgs parses a verb's flags. help: -h or -help printed the usage,
// and the verb ends there with no error, as the flag package's own
// commands do. A verb named takes no positional arguments; "" leaves them
// to the caller (a verb of sub-verbs, or one that checks them itself).
func parseArgs(fs *flag.FlagSet, args []string, verb string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	if verb != "" && fs.NArg() > 0 {
		return false, fmt.Errorf("%s: unexpected argument %q", verb, fs.Arg(0))
	}
	return false, nil
}

func serve(args []string, stderr io.Writer) error {
	fs, o := serveFlags(stderr)
	if help, err := parseArgs(fs, args, "serve"); help || err != nil {
		return err
	}
	log, err := newLogger(o)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	cfg, err := providerConfig()
	if err != nil {
		return err
	}
	var creds *auth.BasicAuthCredentials
	if cfg.EnableBasicAuth {
		creds, err = (&auth.ReadBasicAuthFromDisk{SecretMountPath: cfg.SecretMountPath}).Read()
		if err != nil {
			return fmt.Errorf("basic_auth=true but the credentials in %s cannot be read: %w", cfg.SecretMountPath, err)
		}
	}
	// Listen before anything starts, and serve on this very listener: a
	// port taken is then an error here, and no other process can take the
	// port between a check and the serving.
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", *cfg.TCPPort))
	if err != nil {
		return fmt.Errorf("port %d: %w", *cfg.TCPPort, err)
	}
	defer ln.Close()

	store, err := loadProfiles(o.profilesDir, log)
	if err != nil {
		return err
	}
	// bootstrap.Serve serves /metrics from Prometheus' default registry.
	// faas-gpu's metrics get a registry of their own per serve, gathered
	// with faas-provider's (which live in the default registry).
	reg := prometheus.NewRegistry()
	// The proxy counts every function's load here; the backend's
	// autoscaler reads it.
	load := handlers.NewLoadBook()
	// On Kubernetes the leader's autoscaler also counts what the standbys
	// proxied (they report it every tick); three silent ticks and a
	// standby's queued requests no longer count.
	share := handlers.NewLoadShare(load, 3*o.tick)
	if o.queueMax < 0 {
		return fmt.Errorf("-queue-max: %d is below 0 (0: no bound)", o.queueMax)
	}
	proxyOpts := handlers.ProxyOptions{Timeout: cfg.ReadTimeout, LocalityBound: o.localityBound, QueueMax: o.queueMax, Metrics: handlers.NewProxyMetrics(reg), Load: load}
	switch o.router {
	case "locality":
		proxyOpts.Router = handlers.RouteLocality
	case "least-outstanding":
		proxyOpts.Router = handlers.RouteLeastOutstanding
	default:
		return fmt.Errorf("-router: %q is not locality or least-outstanding", o.router)
	}
	if o.headroom < 1 {
		return fmt.Errorf("-autoscale-headroom: %v must be 1 or more", o.headroom)
	}
	if o.rise <= 0 {
		return fmt.Errorf("-rise-interval: must be positive")
	}
	if o.tick <= 0 {
		return fmt.Errorf("-autoscale-interval: must be positive")
	}
	if o.k8s.AdvertiseURL == "" {
		if ip := os.Getenv("POD_IP"); ip != "" { // the chart sets it from the downward API
			o.k8s.AdvertiseURL = "http://" + net.JoinHostPort(ip, strconv.Itoa(*cfg.TCPPort))
		}
	}
	backend, orchestration, err := newBackend(o, store, load, share, log)
	if err != nil {
		return err
	}

	reg.MustRegister(handlers.NewCollector(backend))
	if own, ok := backend.(interface{ Collectors() []prometheus.Collector }); ok {
		reg.MustRegister(own.Collectors()...) // the Kubernetes backend's clash counter
	}
	invocations := &handlers.Invocations{}
	hlog := log.Named("handlers")
	protect := func(h http.HandlerFunc) http.HandlerFunc {
		if creds == nil {
			return h
		}
		return auth.DecorateWithBasicAuth(h, creds)
	}
	fh := &types.FaaSHandlers{
		FunctionLister:  handlers.MakeListHandler(backend, invocations),
		DeployFunction:  handlers.MakeDeployHandler(backend, hlog),
		UpdateFunction:  handlers.MakeUpdateHandler(backend, hlog),
		DeleteFunction:  handlers.MakeDeleteHandler(backend, hlog, invocations, proxyOpts.Metrics, load, share),
		FunctionStatus:  handlers.MakeStatusHandler(backend, invocations),
		ScaleFunction:   handlers.MakeScaleHandler(backend, hlog),
		Info:            handlers.MakeInfoHandler(orchestration, version, commit),
		Secrets:         handlers.MakeSecretsHandler(backend, hlog),
		Logs:            handlers.MakeLogsHandler(backend, backend, cfg.WriteTimeout),
		ListNamespaces:  protect(handlers.MakeNamespacesHandler(backend)),
		MutateNamespace: protect(handlers.MakeMutateNamespaceHandler(backend)),
		FunctionProxy:   handlers.MakeProxyHandler(backend, invocations, proxyOpts, log.Named("proxy")),
		Health:          handlers.MakeHealthHandler(),
	}
	shared, multi := backend.(multiInstance)
	if multi {
		// Writes asked of a standby go to the leader, authenticated as
		// they came; the standby checks the credentials first.
		fh.DeployFunction = shared.ForwardWrites(fh.DeployFunction)
		fh.UpdateFunction = shared.ForwardWrites(fh.UpdateFunction)
		fh.DeleteFunction = shared.ForwardWrites(fh.DeleteFunction)
		fh.ScaleFunction = shared.ForwardWrites(fh.ScaleFunction)
	}
	r := providerRouter(fh, creds, reg)
	// faas-provider's own metrics would live in Prometheus' default
	// registry; serve gathers it too, for the Go runtime's and the
	// process's.
	r.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{prometheus.DefaultGatherer, reg}, promhttp.HandlerOpts{}))
	r.HandleFunc("/system/gpus", protect(handlers.MakeGPUsHandler(backend, proxyOpts.Metrics))).Methods(http.MethodGet)
	if multi {
		r.HandleFunc(handlers.LoadReportPath, protect(handlers.MakeLoadReportHandler(share, shared))).Methods(http.MethodPost)
	}
	r.PathPrefix("/ui").Handler(protect(handlers.MakeUIHandler())).Methods(http.MethodGet, http.MethodHead)
	// The gateway asks Prometheus without credentials, so this stays open; it
	// reveals only invocation counts, which /function/* callers can see anyway.
	r.HandleFunc("/api/v1/query", handlers.MakePrometheusQueryHandler(invocations)).Methods(http.MethodGet, http.MethodPost)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if multi {
		reporter := &handlers.LoadReporter{Book: load, Leader: shared, From: shared.Identity(), Creds: creds,
			Client: &http.Client{Timeout: 5 * time.Second}, Log: log.Named("load")}
		go reporter.Run(ctx, o.tick)
	}
	log.Info("faas-gpu serving", zap.Int("port", *cfg.TCPPort), zap.Bool("basicAuth", cfg.EnableBasicAuth),
		zap.String("stateDir", o.stateDir), zap.Duration("readTimeout", cfg.ReadTimeout), zap.Duration("writeTimeout", cfg.WriteTimeout),
		zap.String("version", version))
	serveErr := serveHTTP(ctx, ln, r, cfg)
	if serveErr != nil {
		log.Error("provider API stopped", zap.Error(serveErr))
	}

	log.Info("shutting down: stopping replicas")
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(serveErr, backend.Close(closeCtx))
}

// providerRouter routes the faas-provider API as bootstrap.Serve does:
// the same paths and methods, basic auth on the same routes when creds is
// set, and the provider_http_* metrics on the /system routes. serve cannot
// use bootstrap.Serve itself: it opens its own listener and exits the
// process when it cannot, and its router and metrics are process-wide.
func providerRouter(fh *types.FaaSHandlers, creds *auth.BasicAuthCredentials, reg prometheus.Registerer) *mux.Router {
	protect := func(h http.HandlerFunc) http.HandlerFunc {
		if creds == nil || h == nil {
			return h
		}
		return auth.DecorateWithBasicAuth(h, creds)
	}
	labels := []string{"code", "method", "path"}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: "provider", Name: "http_requests_total", Help: "Total number of HTTP requests.",
	}, labels)
	durations := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "provider", Name: "http_request_duration_seconds", Help: "Seconds spent serving HTTP requests.",
		Buckets: prometheus.DefBuckets,
	}, labels)
	reg.MustRegister(requests, durations)
	// path is the route's path without its variables, so that a label
	// never grows with the names callers send.
	// The method label keeps the request's spelling (GET), as
	// faas-provider's does, which promhttp's instrumenters would lower.
	instrument := func(h http.HandlerFunc, path string) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			start := time.Now()
			ww := httputil.NewHttpWriteInterceptor(w) // keeps Flush for log streams
			h(ww, req)
			l := prometheus.Labels{"code": strconv.Itoa(ww.Status()), "method": req.Method, "path": path}
			requests.With(l).Inc()
			durations.With(l).Observe(time.Since(start).Seconds())
		}
	}
	name := "{name:[" + bootstrap.NameExpression + "]+}"
	r := mux.NewRouter()
	routes := []struct {
		path    string // without variables: the metrics' path label
		vars    string // the route's variables, after path
		h       http.HandlerFunc
		methods []string
	}{
		{"/system/functions", "", protect(fh.FunctionLister), []string{http.MethodGet}},
		{"/system/functions", "", protect(fh.DeployFunction), []string{http.MethodPost}},
		{"/system/functions", "", protect(fh.DeleteFunction), []string{http.MethodDelete}},
		{"/system/functions", "", protect(fh.UpdateFunction), []string{http.MethodPut}},
		{"/system/function", "/" + name, protect(fh.FunctionStatus), []string{http.MethodGet}},
		{"/system/scale-function", "/" + name, protect(fh.ScaleFunction), []string{http.MethodPost}},
		{"/system/info", "", protect(fh.Info), []string{http.MethodGet}},
		{"/system/secrets", "", protect(fh.Secrets), []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete}},
		{"/system/logs", "", protect(fh.Logs), []string{http.MethodGet}},
		// The namespace handlers come with their own auth, as faas-provider
		// leaves them.
		{"/system/namespaces", "", fh.ListNamespaces, []string{http.MethodGet}},
		{"/system/namespace", "/{name:[" + bootstrap.NameExpression + "]*}", fh.MutateNamespace,
			[]string{http.MethodPost, http.MethodDelete, http.MethodPut, http.MethodGet}},
	}
	for _, rt := range routes {
		if rt.h == nil {
			continue
		}
		r.HandleFunc(rt.path+rt.vars, instrument(rt.h, rt.path)).Methods(rt.methods...)
	}
	for _, p := range []string{"", "/", "/{params:.*}"} {
		r.HandleFunc("/function/"+name+p, fh.FunctionProxy)
	}
	if fh.Health != nil {
		r.HandleFunc("/healthz", fh.Health).Methods(http.MethodGet, http.MethodHead)
	}
	return r
}

// serveHTTP serves h on ln, with the OpenFaaS timeouts of cfg, until ctx
// ends; then it lets requests in flight finish for up to the write
// timeout. An error serving is returned, never fatal: the caller still
// stops its replicas.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, cfg types.FaaSConfig) error {
	srv := &http.Server{
		Handler:        h,
		ReadTimeout:    cfg.ReadTimeout,
		WriteTimeout:   cfg.WriteTimeout,
		MaxHeaderBytes: http.DefaultMaxHeaderBytes,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), cfg.WriteTimeout+time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down the provider API: %w", err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve on %s: %w", ln.Addr(), err)
	}
	return nil
}

// loadProfiles is the built-in profiles plus, when given, a folder of the
// user's, which override built-ins of the same model and product.
func loadProfiles(dir string, log *zap.Logger) (*profiles.Store, error) {
	store, err := profiles.Builtin()
	if err != nil {
		return nil, fmt.Errorf("built-in profiles: %w", err)
	}
	if dir != "" {
		n, err := store.LoadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("-profiles: %w", err)
		}
		log.Info("profiles loaded", zap.String("dir", dir), zap.Int("files", n))
	}
	log.Info("profiles", zap.Int("models", len(store.Models())))
	return store, nil
}

const profilesUsage = `faas-gpu profiles: work with profile files (docs/profiles.md).

Usage:
  faas-gpu profiles import --csv FILE --gpu PRODUCT [--out DIR]
                             convert a measured latency table into profile files; profiles import -h for its flags
`

// profilesCmd is `faas-gpu profiles`, a verb of sub-verbs. It parses its
// own (empty) flag set so that -h and --help reach it as help, not as an
// unknown sub-verb.
func profilesCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("profiles", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), profilesUsage) }
	if help, err := parseArgs(fs, args, ""); help || err != nil {
		return err
	}
	switch sub := fs.Arg(0); sub {
	case "import":
		return profilesImportCmd(fs.Args()[1:], stdout, stderr)
	case "":
		return errors.New("profiles: usage: faas-gpu profiles import --csv FILE --gpu PRODUCT [--out DIR]")
	default:
		return fmt.Errorf("profiles: unknown sub-verb %q; usage: faas-gpu profiles import --csv FILE --gpu PRODUCT [--out DIR]", sub)
	}
}

type profilesImportOptions struct {
	csv, product, out string
}

func profilesImportFlags(stderr io.Writer) (*flag.FlagSet, *profilesImportOptions) {
	o := &profilesImportOptions{}
	fs := flag.NewFlagSet("profiles import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.csv, "csv", "", "measured table: model,batch,sm_percent,quota_percent,latency_ms")
	fs.StringVar(&o.product, "gpu", "", "GPU product the table was measured on, as NVML names it (e.g. \"Tesla V100-SXM2-16GB\")")
	fs.StringVar(&o.out, "out", ".", "folder to write <model>.yaml files into")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "faas-gpu profiles import: convert a measured latency table into profile files (docs/profiles.md).\n\n"+
			"Usage:\n  faas-gpu profiles import --csv FILE --gpu PRODUCT [--out DIR]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	return fs, o
}

func profilesImportCmd(args []string, stdout, stderr io.Writer) error {
	fs, o := profilesImportFlags(stderr)
	if help, err := parseArgs(fs, args, "profiles import"); help || err != nil {
		return err
	}
	if o.csv == "" {
		return fmt.Errorf("profiles import: --csv is required")
	}
	if o.product == "" {
		return fmt.Errorf("profiles import: --gpu is required")
	}
	n, err := profiles.ImportCSVToDir(o.csv, o.product, o.out)
	if err != nil {
		return fmt.Errorf("profiles import: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %d profiles to %s\n", n, o.out)
	return nil
}

// multiInstance is a backend whose instances share one cluster: a
// standby forwards writes to the leader and reports its load there.
type multiInstance interface {
	handlers.LeaderLocator
	ForwardWrites(http.HandlerFunc) http.HandlerFunc
	Identity() string
}

// providerBackend is what serve needs of a backend: every handler's
// interface, and a way to stop.
type providerBackend interface {
	handlers.FunctionBackend
	handlers.SecretBackend
	handlers.NamespaceBackend
	handlers.ReplicaResolver
	handlers.GPUReporter
	logs.Requester
	Close(ctx context.Context) error
}

// newBackend starts the backend replicas run on and names its
// orchestration for /system/info: Kubernetes when given a kubeconfig or
// running in a pod (GPUs come from the Nodes), local otherwise (GPUs from
// -inventory, NVML or the built-in server).
// The leader's rise pass asks the shared load whether standbys report;
// its tick plans a multi-model function's mix and corrects its capacity
// with the SLO misses from the leader's own counts. Without these the
// Kubernetes backend would silently plan neither (k8s/loop.go observe).
var (
	_ k8s.StandbyLoadSource = (*handlers.LoadShare)(nil)
	_ k8s.ModelLoadSource   = (*handlers.LoadShare)(nil)
	_ k8s.SLOLoadSource     = (*handlers.LoadShare)(nil)
	// Local mode reads the proxy's own book, for the same two.
	_ local.ModelLoadSource = (*handlers.LoadBook)(nil)
	_ local.SLOLoadSource   = (*handlers.LoadBook)(nil)
)

func newBackend(o *serveOptions, store *profiles.Store, load *handlers.LoadBook, shared *handlers.LoadShare, log *zap.Logger) (providerBackend, string, error) {
	rest, onK8s, err := k8s.RestConfig(o.kubeconfig)
	if err != nil {
		return nil, "", err
	}
	if onK8s {
		if o.inventory != "" {
			return nil, "", fmt.Errorf("-inventory: not used on Kubernetes, where GPUs come from the Nodes")
		}
		b, err := k8s.New(k8s.Config{
			Rest:          rest,
			Load:          shared,
			Profiles:      store,
			Autoscale:     scheduler.AutoscaleOptions{Headroom: o.headroom, CoolDown: o.coolDown, NoQueueing: !o.queueing},
			Tick:          o.tick,
			Rise:          o.rise,
			WarmTTL:       o.warmTTL,
			NoConsolidate: !o.consolidate,
			NoStandby:     !o.standby,
			MPSPipeDir:    o.mpsPipeDir,
			Log:           log.Named("k8s"),
			Options:       *o.k8s,
		})
		if err != nil {
			return nil, "", err
		}
		return b, "kubernetes", nil
	}
	inv, err := loadInventory(o, log)
	if err != nil {
		return nil, "", err
	}
	templates, err := local.NewTemplates(local.TemplatesConfig{BuildRoot: o.buildDir, StateDir: o.stateDir, Log: log.Named("templates")})
	if err != nil {
		return nil, "", err
	}
	b, err := local.New(local.Config{
		Templates:     templates,
		StateDir:      o.stateDir,
		Inventory:     inv,
		MPSPipeDir:    o.mpsPipeDir,
		Emulation:     local.Emulation{Latency: o.emulatedLatency, LoadTime: o.emulatedLoadTime},
		Load:          load,
		Profiles:      store,
		Autoscale:     scheduler.AutoscaleOptions{Headroom: o.headroom, CoolDown: o.coolDown, NoQueueing: !o.queueing},
		Tick:          o.tick,
		Rise:          o.rise,
		WarmTTL:       o.warmTTL,
		NoConsolidate: !o.consolidate,
		NoStandby:     !o.standby,
		Log:           log.Named("local"),
	})
	if err != nil {
		return nil, "", err
	}
	return b, "local", nil
}
