package k8s

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/faas-gpu/faas-gpu/profiles"
	"github.com/faas-gpu/faas-gpu/scheduler"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// Config configures the Kubernetes backend.
type Config struct {
	// Rest reaches the API server.
	Rest *rest.Config
	// Load is what the proxy counts of each function, for the autoscaler;
	// nil: nothing is counted.
	Load LoadSource
	// Profiles give slices; nil: none.
	Profiles *profiles.Store
	// Autoscale tunes the SLO autoscaler; Tick is its period. Rise is
	// how often, between ticks, a rising rate is answered
	// (lifecycle.Core.Rise); 0 or at least Tick: never.
	Autoscale scheduler.AutoscaleOptions
	Tick      time.Duration
	Rise      time.Duration
	// WarmTTL is how long a scaled-down replica's pod keeps its model, out
	// of routing, before it is removed; 0: lifecycle.DefaultWarmTTL.
	WarmTTL time.Duration
	// NoConsolidate never moves a replica to free a GPU (serve
	// -consolidate=false, as in local mode).
	NoConsolidate bool
	// NoStandby keeps no standby pods (serve -standby=false, as in local
	// mode).
	NoStandby bool
	// MPSPipeDir is the MPS control daemon's pipe folder on the nodes,
	// mounted into every replica and given as CUDA_MPS_PIPE_DIRECTORY.
	MPSPipeDir string
	Log        *zap.Logger
	Options
}

// Options are the backend's own settings, from flags.
type Options struct {
	// Namespace holds the leader-election Lease and the placeholder pods
	// (the provider's own namespace).
	Namespace string
	// FunctionNamespaces, when given, are the only namespaces functions
	// live in (Roles there suffice); empty: every namespace labelled
	// openfaas=1 if RBAC allows, else $function_namespace.
	FunctionNamespaces []string
	// LeaseName names the Lease instances of faas-gpu elect a leader on.
	LeaseName string
	// Identity is this instance's name in the Lease; empty: host name plus
	// a random suffix.
	Identity string
	// AdvertiseURL is where other instances reach this one's provider API
	// (http://pod-IP:port); the leader publishes it on the Lease and
	// standbys forward writes and send their load there. Empty: standbys
	// refuse writes while this instance leads.
	AdvertiseURL  string
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// ReservationImage runs in the placeholder pods (it only sleeps).
	ReservationImage string
	// ReservationGrace keeps a GPU's placeholder this long after its last
	// replica left, so a function scaling 1 -> 0 -> 1 keeps its GPU.
	ReservationGrace time.Duration
	// RuntimeClass, when set, is the RuntimeClass of function pods (e.g.
	// "nvidia" where the NVIDIA runtime is not the default).
	RuntimeClass string
	// ImagePullPolicy, when set, is function containers' pull policy;
	// empty leaves Kubernetes' default (Always for an image tagged latest
	// or untagged, else IfNotPresent). A GPU function's image is often
	// several GB, and its pull is the container start of a replica on a
	// node that has not run it: IfNotPresent with pinned tags keeps that
	// start to the node's first replica.
	ImagePullPolicy corev1.PullPolicy
	// FunctionPort is the watchdog's port in function pods.
	FunctionPort int
	// WarmReplicas keeps a scaled-down replica's pod, out of routing, as
	// a warm replica (lifecycle's Demote); on by default. Off: a replica
	// scaled down stops and its pod goes.
	WarmReplicas bool
	// ModelStore is the node model store's host folder, mounted read-only
	// at the same path into function pods (FAAS_GPU_MODEL_DIR); empty: no
	// store.
	ModelStore string
	// NodeLostAfter: a node NotReady this long counts as lost and its
	// replicas are placed elsewhere; 0 waits for the Node to be deleted.
	NodeLostAfter time.Duration
	// Resync is how often every function is written again, to undo
	// changes made behind faas-gpu's back.
	Resync time.Duration
	// Parked keeps functions' parked processes as pods (parked.go): a
	// burst's replicas take a pod started ahead instead of starting
	// theirs. Off by default: a parked pod sees every GPU faas-gpu holds
	// on its node (every GPU of it with ParkedSeesAll) until its
	// hand-over.
	Parked bool
	// ParkedSees is what a parked pod sees of its node's GPUs until its
	// hand-over: ParkedSeesHeld, those faas-gpu holds when it is created
	// (a replica placed on one opened later starts its own pod), or
	// ParkedSeesAll, every GPU of the node (NVIDIA_VISIBLE_DEVICES=all).
	ParkedSees string
}

// What a parked pod sees (Options.ParkedSees).
const (
	ParkedSeesHeld = "held"
	ParkedSeesAll  = "all"
)

// DefaultOptions are the flags' defaults: client-go's usual Lease timings.
func DefaultOptions() Options {
	ns := os.Getenv("POD_NAMESPACE") // the chart sets it from the downward API
	if ns == "" {
		ns = "openfaas"
	}
	return Options{
		Namespace:        ns,
		LeaseName:        "faas-gpu",
		LeaseDuration:    15 * time.Second,
		RenewDeadline:    10 * time.Second,
		RetryPeriod:      2 * time.Second,
		ReservationImage: "registry.k8s.io/pause:3.10",
		ReservationGrace: 15 * time.Second,
		FunctionPort:     8080,
		NodeLostAfter:    time.Minute,
		Resync:           time.Minute,
		WarmReplicas:     true,
		ParkedSees:       ParkedSeesHeld,
	}
}

// AddFlags registers the backend's flags on fs; they apply in Kubernetes
// mode only.
func AddFlags(fs *flag.FlagSet) *Options {
	o := DefaultOptions()
	fs.StringVar(&o.Namespace, "k8s-namespace", o.Namespace, "kubernetes: namespace of the leader-election Lease and the GPU placeholder pods (default: $POD_NAMESPACE, else openfaas)")
	fs.Func("k8s-function-namespaces", "kubernetes: comma-separated namespaces functions live in, for an account with Roles only there (default: all labelled openfaas=1 with cluster-wide RBAC, else $function_namespace or openfaas-fn)", func(v string) error {
		o.FunctionNamespaces = parseNamespaces(v)
		return nil
	})
	fs.StringVar(&o.LeaseName, "k8s-lease", o.LeaseName, "kubernetes: name of the Lease provider instances elect a leader on")
	fs.StringVar(&o.Identity, "k8s-identity", o.Identity, "kubernetes: this instance's identity in the Lease (default: host name and a random suffix)")
	fs.StringVar(&o.AdvertiseURL, "k8s-advertise-url", o.AdvertiseURL, "kubernetes: this instance's provider API address for the other instances, published on the Lease while it leads (default: http://$POD_IP:$port when POD_IP is set, else none: standbys refuse writes)")
	fs.DurationVar(&o.LeaseDuration, "k8s-lease-duration", o.LeaseDuration, "kubernetes: how long a standby waits after the leader's last renewal before taking over")
	fs.DurationVar(&o.RenewDeadline, "k8s-renew-deadline", o.RenewDeadline, "kubernetes: how long the leader retries renewing before it stops placing")
	fs.DurationVar(&o.RetryPeriod, "k8s-retry-period", o.RetryPeriod, "kubernetes: how often instances try to acquire or renew the Lease")
	fs.StringVar(&o.ReservationImage, "k8s-reservation-image", o.ReservationImage, "kubernetes: image of the placeholder pods that hold GPUs (nvidia.com/gpu: 1) against the device plugin")
	fs.DurationVar(&o.ReservationGrace, "k8s-reservation-grace", o.ReservationGrace, "kubernetes: how long a GPU's placeholder pod stays after its last replica left")
	fs.StringVar(&o.RuntimeClass, "k8s-runtime-class", o.RuntimeClass, "kubernetes: RuntimeClass of function pods, e.g. nvidia (default: the node's default runtime)")
	fs.BoolVar(&o.WarmReplicas, "k8s-warm-replicas", o.WarmReplicas, "kubernetes: keep a scaled-down replica's pod out of routing as a warm replica, its model loaded (false: a scaled-down replica's pod goes)")
	fs.StringVar(&o.ModelStore, "k8s-model-store", o.ModelStore, "kubernetes: host folder of the node model store, mounted read-only into function pods as FAAS_GPU_MODEL_DIR (default: no store)")
	fs.Func("k8s-image-pull-policy", "kubernetes: imagePullPolicy of function containers: Always, IfNotPresent or Never (default: Kubernetes' own, Always for :latest or no tag, else IfNotPresent)", func(v string) error {
		p, err := parsePullPolicy(v)
		if err != nil {
			return err
		}
		o.ImagePullPolicy = p
		return nil
	})
	fs.IntVar(&o.FunctionPort, "k8s-function-port", o.FunctionPort, "kubernetes: the watchdog's port in function pods")
	fs.DurationVar(&o.NodeLostAfter, "k8s-node-lost-after", o.NodeLostAfter, "kubernetes: a node NotReady this long loses its replicas to other nodes (0: only when the Node is deleted)")
	fs.BoolVar(&o.Parked, "k8s-parked", o.Parked, "kubernetes: keep functions' parked processes (com.openfaas.gpu.parked) as pods started ahead of their placements; a parked pod sees every GPU faas-gpu holds on its node (every GPU of it with -k8s-parked-sees all) until its hand-over")
	fs.Func("k8s-parked-sees", "kubernetes: what a parked pod sees of its node's GPUs until its hand-over: held (those faas-gpu holds when it is created; a replica placed on a GPU opened later starts its own pod) or all (every GPU of the node) (default held)", func(v string) error {
		if v != ParkedSeesHeld && v != ParkedSeesAll {
			return fmt.Errorf("%q is not %s or %s", v, ParkedSeesHeld, ParkedSeesAll)
		}
		o.ParkedSees = v
		return nil
	})
	fs.DurationVar(&o.Resync, "k8s-resync", o.Resync, "kubernetes: how often every function's objects are written again to undo outside changes")
	return &o
}

// parsePullPolicy checks an imagePullPolicy against the three Kubernetes
// knows, so that a typo fails at start and not as every function's pods
// rejected by the API server.
func parsePullPolicy(v string) (corev1.PullPolicy, error) {
	switch p := corev1.PullPolicy(v); p {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
		return p, nil
	}
	return "", fmt.Errorf("%q is not Always, IfNotPresent or Never", v)
}
