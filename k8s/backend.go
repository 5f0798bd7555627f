// Package k8s is faas-gpu's Kubernetes backend: it runs each function's
// replicas as Deployments pinned to the GPUs the scheduler chose, one
// Deployment per (function, GPU, slice), holds those GPUs against the
// NVIDIA device plugin with placeholder pods, and rebuilds every decision
// from the cluster after a restart. Instances elect a leader through a
// Lease: only the leader places replicas and writes; the others serve reads
// and invocations from their informers.
package k8s

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// ErrStandby is returned for changes asked of an instance that is not the
// leader: only the leader places replicas, so two instances can never book
// one GPU share twice.
var ErrStandby = errors.New("this faas-gpu instance is a standby; the leader places replicas")

// standbyError is ErrStandby with the leader's name and how long a client
// should wait before asking again (the Lease's retry period: by then this
// instance may lead, or the client's next try may reach the leader).
type standbyError struct {
	detail string
	retry  time.Duration
}

func (e *standbyError) Error() string             { return ErrStandby.Error() + " (" + e.detail + ")" }
func (e *standbyError) Is(target error) bool      { return target == ErrStandby }
func (e *standbyError) RetryAfter() time.Duration { return e.retry }

// DefaultNamespace is where functions go when a client names none; it is
// created, labelled for OpenFaaS, when missing.
const DefaultNamespace = "openfaas-fn"

// Backend implements the provider's backend on a Kubernetes cluster.
type Backend struct {
	cfg    Config
	log    *zap.Logger
	client kubernetes.Interface

	// scope: the namespaces functions live in (informers.go).
	scope scope
	nodes corelisters.NodeLister
	// Listers by namespace ("" for all namespaces in a cluster-wide scope).
	deps    multi[appslisters.DeploymentLister]
	rss     multi[appslisters.ReplicaSetLister]
	svcs    multi[corelisters.ServiceLister]
	pods    multi[corelisters.PodLister]
	secrets multi[corelisters.SecretLister]
	// resvPods sees the placeholder pods in the provider's namespace.
	resvPods corelisters.PodLister
	// namespaces is nil unless the scope is cluster-wide.
	namespaces corelisters.NamespaceLister

	ctx          context.Context
	cancel       context.CancelFunc
	electionDone chan struct{}
	identity     string
	kickc        chan struct{}

	// gate: every write to the cluster holds it shared; giving up the
	// leadership takes it exclusively, so no write is in flight once an
	// instance has stopped leading.
	gate sync.RWMutex
	// txMu is held by every operation on the core from the operation until
	// its record is written or refused, and by the control loop's passes:
	// the operation an undo (txn.go) takes back is then the core's last.
	// Taken before mu.
	txMu sync.Mutex

	mu      sync.Mutex
	st      *state // the leader's decisions; nil on a standby
	leading bool
	closing bool
	leader  string // the leader last observed
	// lease is what the Lease said at its last read or write (forward.go).
	lease struct {
		holder, url string
		renew       metav1.Time
		seen        time.Time // when this instance saw the renewal change
		valid       time.Duration
	}
	// w is this leadership term's writer (queue.go); nil on a standby.
	w *writer
	// written are Deployments this instance wrote that the informer may not
	// show yet, so a sync right after a write still finds them.
	written map[string]map[string]bool
	// writeSeq counts the Deployments created or updated; lastWrite is
	// the count at each one's last write (key: namespace/name). A change
	// undone after one of its Deployments was written may have pods
	// running its bookings (txn.go).
	writeSeq  uint64
	lastWrite map[string]uint64
	// held are the functions an open change placed besides its own: not
	// written until that change is written or undone.
	held map[string]bool
	// reservations this instance created or saw, and since when each has
	// been unused (zero: in use).
	resv     map[string]time.Time
	resvMu   sync.Mutex
	problems map[string]bool // node problems already logged
	nodeObs  *nodeObserver

	viewMu   sync.Mutex
	view     *state
	viewTime time.Time

	inflight sync.Map // pod UID -> *atomic.Int64
	// parkProbes are the parked processes whose pod is being asked
	// GET /_/gpu (parked.go), by process ID.
	parkProbes sync.Map
	// podSlice is each routed pod's slice config, decoded once from its
	// placement annotation (resolver.go), pod UID -> scheduler.SliceConfig.
	podSlice sync.Map
	// requests are the functions' GPU requests decoded from their records
	// (routeinfo.go), function key -> gpu.Request.
	requests sync.Map
	podModel sync.Map // pod name -> *podModels (resolver.go)
	podLoads sync.Map // pod name -> map[string]float64, its model loads in seconds (modelload.go)
	// product is the cluster's main GPU product as the loop last saw it,
	// for the proxy's profile lookups (ModelLoadSeconds), off any lock.
	product atomic.Pointer[string]
	// takesNoLoads are the pods that answered a model load as servers
	// that do not know it (modelload.go): pod UID -> true.
	takesNoLoads sync.Map
	// modelsTold: a pod said something new about its models since the
	// loop last fed them to the core's cache (feedModels).
	modelsTold atomic.Bool
	// cacheHits and cacheMisses are the model-cache outcomes this instance
	// saw: requests it proxied to a pod holding their model or not, and
	// pods it saw load their model at start (a miss, as local mode counts
	// a process replica's start). They outlive state rebuilds, which book
	// every replica afresh, so they only grow.
	cacheHits, cacheMisses atomic.Uint64
}

// New connects to the API server, starts the informers, waits for them and
// joins the leader election. It returns once this instance leads, or knows
// another does, or after a few seconds.
func New(cfg Config) (*Backend, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Rest == nil {
		return nil, errors.New("kubernetes: no API server configuration")
	}
	if err := checkAdvertiseURL(cfg.AdvertiseURL); err != nil {
		return nil, err
	}
	def := DefaultOptions()
	if cfg.Namespace == "" {
		cfg.Namespace = def.Namespace
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = def.LeaseName
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = def.LeaseDuration, def.RenewDeadline, def.RetryPeriod
	}
	if cfg.ReservationImage == "" {
		cfg.ReservationImage = def.ReservationImage
	}
	if cfg.FunctionPort <= 0 {
		cfg.FunctionPort = def.FunctionPort
	}
	if cfg.Resync <= 0 {
		cfg.Resync = def.Resync
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.MPSPipeDir == "" {
		cfg.MPSPipeDir = "/tmp/nvidia-mps"
	}
	client, err := kubernetes.NewForConfig(cfg.Rest)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Backend{
		cfg: cfg, log: cfg.Log, client: client, ctx: ctx, cancel: cancel,
		electionDone: make(chan struct{}), kickc: make(chan struct{}, 1),
		written: map[string]map[string]bool{}, resv: map[string]time.Time{}, problems: map[string]bool{}, nodeObs: newNodeObserver(),
		identity: cfg.Identity,
	}
	if b.identity == "" {
		host, _ := os.Hostname()
		b.identity = host + "_" + newReplicaID("")[1:]
	}
	if _, err := b.client.Discovery().ServerVersion(); err != nil {
		cancel()
		return nil, fmt.Errorf("kubernetes: cannot reach the API server at %s: %w", cfg.Rest.Host, err)
	}
	b.scope = decideScope(ctx, b.client, cfg.FunctionNamespaces, b.log)
	if err := b.startInformers(); err != nil {
		cancel()
		return nil, err
	}
	if b.scope.clusterWide {
		b.ensureNamespace(ctx, cfg.Namespace, false)
	}
	observed := make(chan struct{})
	go b.runElection(observed)
	select {
	case <-observed:
	case <-time.After(5 * time.Second):
		b.log.Warn("no leader observed yet; serving as a standby until one is", zap.String("lease", cfg.Namespace+"/"+cfg.LeaseName))
	}
	return b, nil
}

// kick wakes the leader's control loop; it never blocks.
func (b *Backend) kick() {
	select {
	case b.kickc <- struct{}{}:
	default:
	}
}

// Close stops placing (waiting for writes in flight), hands the Lease to a
// standby at once and stops the informers. Functions keep running: they
// live in the cluster.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closing = true
	b.mu.Unlock()
	b.stopLeading()
	b.cancel()
	select {
	case <-b.electionDone:
	case <-ctx.Done():
		return fmt.Errorf("kubernetes: leader election did not stop: %w", ctx.Err())
	}
	return nil
}

// beginWrite admits one write to the cluster, on the leader only.
func (b *Backend) beginWrite() (func(), error) {
	b.gate.RLock()
	b.mu.Lock()
	ok := b.leading
	b.mu.Unlock()
	if !ok {
		b.gate.RUnlock()
		return nil, b.standbyError()
	}
	return b.gate.RUnlock, nil
}

func (b *Backend) standbyError() error {
	b.mu.Lock()
	leader := b.leader
	b.mu.Unlock()
	if leader == "" || leader == b.identity {
		return &standbyError{detail: "no leader elected yet", retry: b.cfg.RetryPeriod}
	}
	return &standbyError{detail: "leader: " + leader, retry: b.cfg.RetryPeriod}
}

// functionPods lists a function's pods from the informer.
func (b *Backend) functionPods(ns, name string) []*corev1.Pod {
	sel := labels.SelectorFromSet(labels.Set{LabelFunction: name})
	pods, _ := b.pods.in(ns).Pods(ns).List(sel)
	return pods
}

// functionDeployments lists a function's Deployments from the informer.
func (b *Backend) functionDeployments(ns, name string) []*appsv1.Deployment {
	deps, _ := b.deps.in(ns).Deployments(ns).List(labels.SelectorFromSet(labels.Set{LabelFunction: name}))
	return deps
}

// listerObjects are the informers' copies of everything the state is
// rebuilt from, for a standby's reads.
func (b *Backend) listerObjects(now time.Time) clusterObjects {
	nodes, _ := b.nodes.List(labels.Everything())
	inv, _ := inventoryFromNodes(nodes, now, b.cfg.NodeLostAfter)
	hasFn, _ := labels.NewRequirement(LabelFunction, selection.Exists, nil)
	fnSel := labels.NewSelector().Add(*hasFn)
	var objs clusterObjects
	objs.inventory = inv
	b.svcs.each(func(l corelisters.ServiceLister) {
		svcs, _ := l.List(fnSel)
		objs.records = append(objs.records, svcs...)
	})
	b.deps.each(func(l appslisters.DeploymentLister) {
		deps, _ := l.List(fnSel)
		objs.deployments = append(objs.deployments, deps...)
	})
	b.pods.each(func(l corelisters.PodLister) {
		pods, _ := l.List(fnSel)
		objs.pods = append(objs.pods, pods...)
	})
	return objs
}
