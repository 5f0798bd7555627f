package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// msgNoNVML is what the agent says when the driver's library is not there:
// on a GPU node that is nearly always a pod without the nvidia runtime.
const msgNoNVML = "no NVML library: is the NVIDIA driver installed and the container run with the nvidia runtime?"

// agentFieldManager names the agent in the Node's managed fields.
const agentFieldManager = "faas-gpu-agent"

const agentUsage = `faas-gpu agent: publish this node's GPUs (found with NVML) on its Kubernetes Node,
in the annotation ` + gpu.AnnotationNodeGPUs + ` (docs/agent.md). Runs as a DaemonSet on GPU nodes.

Usage:
  faas-gpu agent [flags]
  faas-gpu agent -once      print what NVML discovers, as the annotation's JSON, and exit;
                            stderr gets each GPU's utilisation and processes, for people

Flags:
`

type agentOptions struct {
	nodeName    string
	kubeconfig  string
	nvmlLibrary string
	interval    time.Duration
	once        bool
	metricsPort int
	logLevel    zapcore.Level
	logFormat   string
}

func agentFlags(stderr io.Writer) (*flag.FlagSet, *agentOptions) {
	o := &agentOptions{logLevel: zapcore.InfoLevel}
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "the Node to annotate (a DaemonSet sets NODE_NAME from spec.nodeName)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file; empty: the pod's in-cluster configuration")
	fs.StringVar(&o.nvmlLibrary, "nvml-library", "", "path of libnvidia-ml.so.1; empty: the linker's search path (GPU Operator hosts keep it under /run/nvidia/driver)")
	fs.DurationVar(&o.interval, "interval", 30*time.Second, "how often GPUs are re-discovered; the Node is patched only when they changed")
	fs.BoolVar(&o.once, "once", false, "discover once, print the annotation's JSON on stdout (and each GPU's utilisation and processes on stderr) and exit; needs no Kubernetes")
	fs.IntVar(&o.metricsPort, "metrics-port", 0, "serve /metrics and /healthz on this port; 0: off")
	fs.Var(&o.logLevel, "log-level", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "console or json")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), agentUsage)
		fs.PrintDefaults()
	}
	return fs, o
}

// agentCmd is `faas-gpu agent`.
func agentCmd(args []string, stdout, stderr io.Writer) error {
	fs, o := agentFlags(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("agent: unexpected argument %q", fs.Arg(0))
	}
	if o.interval <= 0 {
		return fmt.Errorf("agent: -interval must be positive")
	}
	if o.metricsPort < 0 || o.metricsPort > 65535 {
		return fmt.Errorf("agent: -metrics-port %d is not a TCP port", o.metricsPort)
	}
	if !o.once && o.nodeName == "" {
		return fmt.Errorf("agent: -node-name (or NODE_NAME) is required to know which Node to annotate")
	}
	src := gpu.NewNVML(o.nodeName, o.nvmlLibrary)
	// NVML first, before any Kubernetes set-up: a missing driver is the
	// likeliest fault on a new GPU node, and its message must not hide
	// behind a kubeconfig error.
	first, err := discoverNodeGPUs(src)
	if err != nil {
		return err
	}
	if o.once {
		if err := printNodeGPUs(stdout, first); err != nil {
			return err
		}
		return printReadings(stderr, first)
	}

	log, err := newLogger(&serveOptions{logLevel: o.logLevel, logFormat: o.logFormat})
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	client, err := kubeClient(o.kubeconfig)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	a := &agent{
		src:      src,
		pub:      &annotationPublisher{client: client, node: o.nodeName},
		interval: o.interval,
		log:      log,
		metrics:  newAgentMetrics(reg),
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.metricsPort > 0 {
		stopMetrics, err := a.serveMetrics(o.metricsPort, reg)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	log.Info("faas-gpu agent", zap.String("node", o.nodeName), zap.Duration("interval", o.interval),
		zap.String("annotation", gpu.AnnotationNodeGPUs), zap.String("version", version))
	return a.run(ctx, first)
}

// gpuSource is where the agent's GPUs come from: NVML, or a fake in tests.
type gpuSource interface {
	NodeGPUs() (gpu.NodeGPUs, error)
}

// discoverNodeGPUs turns "no NVML here" into the agent's one clear message.
func discoverNodeGPUs(src gpuSource) (gpu.NodeGPUs, error) {
	n, err := src.NodeGPUs()
	if errors.Is(err, gpu.ErrNoDiscovery) {
		return gpu.NodeGPUs{}, fmt.Errorf("agent: %s (%w)", msgNoNVML, err)
	}
	if err != nil {
		return gpu.NodeGPUs{}, fmt.Errorf("agent: discover GPUs: %w", err)
	}
	return n, nil
}

// printNodeGPUs prints the annotation's value, indented for people; it is
// the same JSON document the Node gets.
func printNodeGPUs(w io.Writer, n gpu.NodeGPUs) error {
	value, err := gpu.EncodeNodeGPUs(n)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(value), "", "  "); err != nil {
		return fmt.Errorf("indent: %w", err)
	}
	buf.WriteByte('\n')
	_, err = w.Write(buf.Bytes())
	return err
}

// printReadings prints, for people, what -once read beyond the
// annotation: utilisation, which the annotation leaves out, and each
// process's kind and memory. It goes to stderr so stdout stays the
// annotation's JSON for scripts.
func printReadings(w io.Writer, n gpu.NodeGPUs) error {
	var b bytes.Buffer
	for _, g := range n.GPUs {
		util := "utilisation not reported"
		if u := g.Utilization; u != nil {
			util = fmt.Sprintf("utilisation %d %%, memory controller %d %%", u.GPUPercent, u.MemoryPercent)
		}
		fmt.Fprintf(&b, "GPU %d %s (%s): %s, memory used %s, %d processes\n",
			g.Index, g.UUID, g.Product, util, inMiB(g.MemoryUsedBytes), len(g.Processes))
		for _, p := range g.Processes {
			mem := inMiB(p.MemoryBytes)
			if p.MemoryUnknown {
				mem = "memory not visible to NVML"
			}
			fmt.Fprintf(&b, "  pid %d %s %s\n", p.PID, p.Kind, mem)
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

func inMiB(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// kubeClient uses the kubeconfig when given, else the pod's service
// account (the DaemonSet case).
func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("agent: -kubeconfig %s: %w", kubeconfig, err)
		}
	} else {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("agent: not in a cluster and no -kubeconfig (use -once to only print the GPUs): %w", err)
		}
	}
	cfg.UserAgent = "faas-gpu-agent/" + version
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent: kubernetes client: %w", err)
	}
	return client, nil
}

// annotationPublisher writes the annotation on one Node, only when the
// Node does not already carry that exact value. Comparing with the Node
// rather than with what this process last wrote also repairs an annotation
// someone removed, and makes a restarted agent patch nothing.
type annotationPublisher struct {
	client kubernetes.Interface
	node   string
}

// publish reports whether the Node was patched.
func (p *annotationPublisher) publish(ctx context.Context, value string) (bool, error) {
	node, err := p.client.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("get node %s: %w", p.node, err)
	}
	if cur, ok := node.Annotations[gpu.AnnotationNodeGPUs]; ok && cur == value {
		return false, nil
	}
	// A merge patch of one annotation leaves the Node's other annotations
	// and fields alone, and needs no resourceVersion: the agent is the only
	// writer of this key.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{gpu.AnnotationNodeGPUs: value}}})
	if err != nil {
		return false, fmt.Errorf("patch: %w", err)
	}
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, p.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: agentFieldManager}); err != nil {
		return false, fmt.Errorf("patch node %s: %w", p.node, err)
	}
	return true, nil
}

// agent re-discovers on every interval and publishes what changed.
type agent struct {
	src      gpuSource
	pub      *annotationPublisher
	interval time.Duration
	log      *zap.Logger
	metrics  *agentMetrics

	lastOK    atomic.Int64    // unix nanoseconds of the last good pass, for /healthz
	migWarned map[string]bool // GPUs already logged as in MIG mode, so the log says it once
}

// run publishes first (already discovered), then re-discovers until ctx
// ends. The first pass fails the agent, so a wrong node name or missing
// RBAC shows as a crashing pod with a message; later failures are logged
// and retried, since the last good annotation stays on the Node.
func (a *agent) run(ctx context.Context, first gpu.NodeGPUs) error {
	if err := a.publish(ctx, first); err != nil {
		return fmt.Errorf("agent: %w (does -node-name name this Node, and may the agent's service account get and patch nodes?)", err)
	}
	t := time.NewTicker(a.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			a.log.Info("agent stopping; the annotation stays on the Node")
			return nil
		case <-t.C:
		}
		if err := a.pass(ctx); err != nil {
			if errors.Is(err, gpu.ErrNoDiscovery) {
				return err // the driver went away: nothing to retry
			}
			if ctx.Err() != nil {
				return nil
			}
			a.log.Warn("agent pass failed; retrying next interval", zap.Error(err))
		}
	}
}

// pass is one re-discovery and publication.
func (a *agent) pass(ctx context.Context) error {
	n, err := a.src.NodeGPUs()
	if err != nil {
		a.metrics.discoveries.WithLabelValues("error").Inc()
		if errors.Is(err, gpu.ErrNoDiscovery) {
			return fmt.Errorf("agent: %s (%w)", msgNoNVML, err)
		}
		return fmt.Errorf("discover GPUs: %w", err)
	}
	return a.publish(ctx, n)
}

func (a *agent) publish(ctx context.Context, n gpu.NodeGPUs) error {
	a.metrics.discoveries.WithLabelValues("ok").Inc()
	a.metrics.observe(n)
	value, err := gpu.EncodeNodeGPUs(n)
	if err != nil {
		return err
	}
	changed, err := a.pub.publish(ctx, value)
	if err != nil {
		return err
	}
	now := time.Now()
	a.lastOK.Store(now.UnixNano())
	a.metrics.lastSuccess.Set(float64(now.Unix()))
	if changed {
		a.metrics.patches.Inc()
		a.log.Info("published GPUs on the Node", zap.String("node", a.pub.node), zap.Int("gpus", len(n.GPUs)), zap.Int("bytes", len(value)))
		for _, g := range n.GPUs {
			if g.MIGEnabled && !a.migWarned[g.UUID] {
				if a.migWarned == nil {
					a.migWarned = map[string]bool{}
				}
				a.migWarned[g.UUID] = true
				a.log.Warn("GPU in MIG mode: not offered for MPS slices", zap.Int("index", g.Index), zap.String("uuid", g.UUID))
			} else if !g.MIGEnabled && g.ComputeMode != "" && g.ComputeMode != gpu.ComputeModeExclusiveProcess {
				a.log.Debug("GPU not in Exclusive_Process compute mode: processes outside MPS can share it",
					zap.Int("index", g.Index), zap.String("uuid", g.UUID), zap.String("computeMode", g.ComputeMode))
			}
		}
	} else {
		a.log.Debug("GPUs unchanged", zap.Int("gpus", len(n.GPUs)))
	}
	return nil
}

// healthy is true while passes succeed: a liveness probe restarts an agent
// stuck for three intervals.
func (a *agent) healthy(now time.Time) bool {
	last := a.lastOK.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) <= 3*a.interval
}

// serveMetrics serves /metrics and /healthz until the returned stop runs.
func (a *agent) serveMetrics(port int, reg *prometheus.Registry) (stop func(), err error) {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return nil, fmt.Errorf("agent: -metrics-port %d: %w", port, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.healthy(time.Now()) {
			http.Error(w, "no successful pass in the last three intervals", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("metrics server", zap.Error(err))
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// agentMetrics live in the agent's own registry, not Prometheus' global
// one.
type agentMetrics struct {
	gpus        prometheus.Gauge
	snapshot    *gpuCollector
	discoveries *prometheus.CounterVec
	patches     prometheus.Counter
	lastSuccess prometheus.Gauge
}

func newAgentMetrics(reg prometheus.Registerer) *agentMetrics {
	m := &agentMetrics{
		gpus:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "faas_gpu_agent_gpus", Help: "GPUs NVML reports on this node, MIG-enabled ones included."}),
		snapshot: newGPUCollector(),
		discoveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "faas_gpu_agent_discoveries_total",
			Help: "NVML discoveries by result (ok, error)."}, []string{"result"}),
		patches: prometheus.NewCounter(prometheus.CounterOpts{Name: "faas_gpu_agent_annotation_patches_total",
			Help: "Patches of the Node annotation, made only when the GPUs changed."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "faas_gpu_agent_last_success_timestamp_seconds",
			Help: "When a discovery was last published or found unchanged."}),
	}
	reg.MustRegister(m.gpus, m.snapshot, m.discoveries, m.patches, m.lastSuccess)
	return m
}

// observe makes n what the next scrape reports.
func (m *agentMetrics) observe(n gpu.NodeGPUs) {
	m.gpus.Set(float64(len(n.GPUs)))
	m.snapshot.set(n.GPUs)
}

// gpuCollector reports the per-GPU and per-process series of the last
// discovery, built at scrape time. Gauge vectors would have to be Reset
// and refilled on every discovery, and a scrape in between would see GPUs
// vanish; replacing one snapshot under a lock cannot be seen half done, and
// a GPU or process that went away simply has no series any more.
type gpuCollector struct {
	memoryUsed, processes, utilization, memoryUtilization, processMemory *prometheus.Desc

	mu   sync.Mutex
	gpus []gpu.AgentGPU // the last discovery; never changed in place
}

func newGPUCollector() *gpuCollector {
	gpuLabels := []string{"uuid", "index", "product"}
	return &gpuCollector{
		memoryUsed: prometheus.NewDesc("faas_gpu_agent_gpu_memory_used_bytes",
			"GPU memory in use when the agent last looked.", gpuLabels, nil),
		processes: prometheus.NewDesc("faas_gpu_agent_gpu_processes",
			"Compute and MPS client processes on the GPU when the agent last looked.", gpuLabels, nil),
		utilization: prometheus.NewDesc("faas_gpu_agent_gpu_utilization_ratio",
			"Fraction of NVML's last sample period (1/6 s to 1 s, by product) in which at least one kernel ran on the GPU, "+
				"however few SMs it used; absent when the GPU does not report it (MIG mode).", gpuLabels, nil),
		memoryUtilization: prometheus.NewDesc("faas_gpu_agent_gpu_memory_controller_utilization_ratio",
			"Fraction of NVML's last sample period in which the GPU's device memory was being read or written "+
				"(busy time, not bandwidth or capacity used); absent when the GPU does not report it (MIG mode).", gpuLabels, nil),
		processMemory: prometheus.NewDesc("faas_gpu_agent_process_gpu_memory_used_bytes",
			"GPU memory used by one process on the GPU (kind: compute, or mps for an MPS client) when the agent last looked; "+
				"absent for a process whose memory NVML cannot see.", []string{"uuid", "pid", "kind"}, nil),
	}
}

// set replaces the snapshot; gpus must not be changed afterwards.
func (c *gpuCollector) set(gpus []gpu.AgentGPU) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gpus = gpus
}

// Describe makes the collector a checked one: the registry refuses a
// second collector with the same metric names.
func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.memoryUsed, c.processes, c.utilization, c.memoryUtilization, c.processMemory} {
		ch <- d
	}
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	gpus := c.gpus
	c.mu.Unlock()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
		if err != nil {
			m = prometheus.NewInvalidMetric(d, err)
		}
		ch <- m
	}
	for _, g := range gpus {
		labels := []string{g.UUID, strconv.Itoa(g.Index), g.Product}
		gauge(c.memoryUsed, float64(g.MemoryUsedBytes), labels...)
		gauge(c.processes, float64(len(g.Processes)), labels...)
		if u := g.Utilization; u != nil {
			gauge(c.utilization, float64(u.GPUPercent)/100, labels...)
			gauge(c.memoryUtilization, float64(u.MemoryPercent)/100, labels...)
		}
		for _, p := range g.Processes {
			if !p.MemoryUnknown {
				gauge(c.processMemory, float64(p.MemoryBytes), g.UUID, strconv.FormatUint(uint64(p.PID), 10), p.Kind)
			}
		}
	}
}
