// Package agent is the GPU node agent (faas-gpu agent): it discovers a
// node's GPUs with NVML (package gpu), publishes them in an annotation on
// the node's Kubernetes Node, and exports what it read as metrics. Package
// main only parses its flags and wires it up.
package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/faas-gpu/faas-gpu/k8s"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// MsgNoNVML is what the agent says when the driver's library is not there:
// on a GPU node that is nearly always a pod without the nvidia runtime.
const MsgNoNVML = "no NVML library: is the NVIDIA driver installed and the container run with the nvidia runtime?"

// fieldManager names the agent in the Node's managed fields.
const fieldManager = "faas-gpu-agent"

// GPUSource is where the agent's GPUs come from: NVML (gpu.NewNVML), or a
// fake in tests.
type GPUSource interface {
	NodeGPUs() (gpu.NodeGPUs, error)
}

// Discover is one discovery, with "no NVML here" turned into the agent's
// one clear message (MsgNoNVML, wrapping gpu.ErrNoDiscovery).
func Discover(src GPUSource) (gpu.NodeGPUs, error) {
	n, err := src.NodeGPUs()
	if errors.Is(err, gpu.ErrNoDiscovery) {
		return gpu.NodeGPUs{}, fmt.Errorf("agent: %s (%w)", MsgNoNVML, err)
	}
	if err != nil {
		return gpu.NodeGPUs{}, fmt.Errorf("agent: discover GPUs: %w", err)
	}
	return n, nil
}

// PrintNodeGPUs prints the annotation's value, indented for people; it is
// the same JSON document the Node gets.
func PrintNodeGPUs(w io.Writer, n gpu.NodeGPUs) error {
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

// PrintReadings prints, for people, what -once read beyond the
// annotation: utilisation, which the annotation leaves out, and each
// process's kind and memory. It goes to stderr so stdout stays the
// annotation's JSON for scripts.
func PrintReadings(w io.Writer, n gpu.NodeGPUs) error {
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

// NewClient reaches the API server as the provider does (k8s.RestConfig):
// the kubeconfig when given (else $KUBECONFIG), else the pod's service
// account (the DaemonSet case). userAgent names the agent and its version
// in the API server's logs.
func NewClient(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	cfg, ok, err := k8s.RestConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if !ok {
		return nil, errors.New("agent: not in a cluster and no -kubeconfig (use -once to only print the GPUs)")
	}
	cfg.UserAgent = userAgent
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("agent: kubernetes client: %w", err)
	}
	return client, nil
}

// AnnotationPublisher writes the annotation on one Node, only when the
// Node does not already carry that exact value. Comparing with the Node
// rather than with what this process last wrote also repairs an annotation
// someone removed, and makes a restarted agent patch nothing.
type AnnotationPublisher struct {
	client kubernetes.Interface
	node   string
}

// NewAnnotationPublisher publishes on the Node named node.
func NewAnnotationPublisher(client kubernetes.Interface, node string) *AnnotationPublisher {
	return &AnnotationPublisher{client: client, node: node}
}

// Publish reports whether the Node was patched.
func (p *AnnotationPublisher) Publish(ctx context.Context, value string) (bool, error) {
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
	if _, err := p.client.CoreV1().Nodes().Patch(ctx, p.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return false, fmt.Errorf("patch node %s: %w", p.node, err)
	}
	return true, nil
}

// DeviceLister says which GPUs the device plugin gave which pods: the
// kubelet's PodResources API (PodResources), or a fake in tests.
type DeviceLister interface {
	Devices(ctx context.Context) (placeholders, claims []gpu.PodDevices, err error)
}

// Config is what an Agent is made of.
type Config struct {
	Source    GPUSource
	Publisher *AnnotationPublisher
	// ModelStore is the node model store's folder as the agent sees it;
	// empty: no store, and the annotation lists no models.
	ModelStore string
	// Devices, when set, adds the placeholders' and other pods' GPUs to
	// the annotation.
	Devices DeviceLister
	// Interval between discoveries; the Node is patched only on a change.
	Interval time.Duration
	Log      *zap.Logger
	// Metrics registers the agent's metrics (a registry of its own, not
	// Prometheus' global one).
	Metrics prometheus.Registerer
}

// New makes an agent; Run starts it.
func New(cfg Config) (*Agent, error) {
	if cfg.Source == nil || cfg.Publisher == nil || cfg.Log == nil || cfg.Metrics == nil {
		return nil, errors.New("agent: Source, Publisher, Log and Metrics are required")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("agent: -interval %s must be positive", cfg.Interval)
	}
	return &Agent{src: cfg.Source, pub: cfg.Publisher, store: cfg.ModelStore, devices: cfg.Devices,
		interval: cfg.Interval, log: cfg.Log, metrics: newMetrics(cfg.Metrics)}, nil
}

// Agent re-discovers on every interval and publishes what changed.
type Agent struct {
	src      GPUSource
	pub      *AnnotationPublisher
	store    string
	devices  DeviceLister
	interval time.Duration
	log      *zap.Logger
	metrics  *metrics

	lastOK    atomic.Int64    // unix nanoseconds of the last good pass, for /healthz
	migWarned map[string]bool // GPUs already logged as in MIG mode, so the log says it once
}

// Run publishes first (already discovered), then re-discovers until ctx
// ends. The first pass fails the agent, so a wrong node name or missing
// RBAC shows as a crashing pod with a message; later failures are logged
// and retried, since the last good annotation stays on the Node.
func (a *Agent) Run(ctx context.Context, first gpu.NodeGPUs) error {
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
func (a *Agent) pass(ctx context.Context) error {
	n, err := a.src.NodeGPUs()
	if err != nil {
		a.metrics.discoveries.WithLabelValues("error").Inc()
		if errors.Is(err, gpu.ErrNoDiscovery) {
			return fmt.Errorf("agent: %s (%w)", MsgNoNVML, err)
		}
		return fmt.Errorf("discover GPUs: %w", err)
	}
	return a.publish(ctx, n)
}

// node adds to the GPUs what the node's store and its kubelet say. Both
// are all or nothing, as discovery is: a field left out would read as
// "the store is empty" or "no placeholder holds a GPU", and the provider
// would act on it.
func (a *Agent) node(ctx context.Context, n gpu.NodeGPUs) (gpu.NodeGPUs, error) {
	if a.store != "" {
		models, err := ScanModelStore(a.store)
		if err != nil {
			return n, err
		}
		n.Models = models
		a.metrics.storeModels.Set(float64(len(models)))
	}
	if a.devices != nil {
		holders, claims, err := a.devices.Devices(ctx)
		if err != nil {
			return n, err
		}
		n.Placeholders, n.Claims = holders, claims
	}
	return n, nil
}

func (a *Agent) publish(ctx context.Context, n gpu.NodeGPUs) error {
	n, err := a.node(ctx, n)
	if err != nil {
		a.metrics.discoveries.WithLabelValues("error").Inc()
		return err
	}
	a.metrics.discoveries.WithLabelValues("ok").Inc()
	a.metrics.observe(n)
	value, err := gpu.EncodeNodeGPUs(n)
	if err != nil {
		return err
	}
	changed, err := a.pub.Publish(ctx, value)
	if err != nil {
		return err
	}
	now := time.Now()
	a.lastOK.Store(now.UnixNano())
	a.metrics.lastSuccess.Set(float64(now.Unix()))
	if changed {
		a.metrics.patches.Inc()
		a.log.Info("published GPUs on the Node", zap.String("node", a.pub.node), zap.Int("gpus", len(n.GPUs)),
			zap.Int("models", len(n.Models)), zap.Int("placeholders", len(n.Placeholders)), zap.Int("bytes", len(value)))
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
func (a *Agent) healthy(now time.Time) bool {
	last := a.lastOK.Load()
	return last != 0 && now.Sub(time.Unix(0, last)) <= 3*a.interval
}

// ServeMetrics serves reg on /metrics, and /healthz, on port until the
// returned stop runs.
func (a *Agent) ServeMetrics(port int, reg prometheus.Gatherer) (stop func(), err error) {
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

// metrics live in the agent's own registry, not Prometheus' global one.
type metrics struct {
	gpus        prometheus.Gauge
	snapshot    *gpuCollector
	discoveries *prometheus.CounterVec
	patches     prometheus.Counter
	lastSuccess prometheus.Gauge
	storeModels prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		gpus:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "faas_gpu_agent_gpus", Help: "GPUs NVML reports on this node, MIG-enabled ones included."}),
		snapshot: newGPUCollector(),
		discoveries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "faas_gpu_agent_discoveries_total",
			Help: "Discoveries (NVML, the model store, the kubelet's PodResources) by result (ok, error)."}, []string{"result"}),
		patches: prometheus.NewCounter(prometheus.CounterOpts{Name: "faas_gpu_agent_annotation_patches_total",
			Help: "Patches of the Node annotation, made only when the GPUs changed."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "faas_gpu_agent_last_success_timestamp_seconds",
			Help: "When a discovery was last published or found unchanged."}),
		storeModels: prometheus.NewGauge(prometheus.GaugeOpts{Name: "faas_gpu_agent_model_store_models",
			Help: "Models the node's model store held when the agent last looked (0 without a store)."}),
	}
	reg.MustRegister(m.gpus, m.snapshot, m.discoveries, m.patches, m.lastSuccess, m.storeModels)
	return m
}

// observe makes n what the next scrape reports.
func (m *metrics) observe(n gpu.NodeGPUs) {
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
