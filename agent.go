package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/faas-gpu/faas-gpu/agent"
	"github.com/faas-gpu/faas-gpu/gpu"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

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
	modelStore  string
	podResSock  string
	placeholdNS string
	gpuResource string
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
	fs.StringVar(&o.modelStore, "model-store", "", "the node model store's folder as the agent sees it; its entries are published as the node's models (empty: no store)")
	fs.StringVar(&o.podResSock, "pod-resources-socket", "", "the kubelet's PodResources socket ("+agent.DefaultPodResourcesSocket+"); publishes which GPU each placeholder pod holds (empty: off)")
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = "openfaas"
	}
	fs.StringVar(&o.placeholdNS, "placeholder-namespace", ns, "namespace of the provider's GPU placeholder pods (default: $POD_NAMESPACE, else openfaas)")
	fs.StringVar(&o.gpuResource, "gpu-resource", "nvidia.com/gpu", "the device plugin's GPU resource, as the placeholders request it")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), agentUsage)
		fs.PrintDefaults()
	}
	return fs, o
}

// agentCmd is `faas-gpu agent`: flags in, package agent wired up.
func agentCmd(args []string, stdout, stderr io.Writer) error {
	fs, o := agentFlags(stderr)
	if help, err := parseArgs(fs, args, "agent"); help || err != nil {
		return err
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
	first, err := agent.Discover(src)
	if err != nil {
		return err
	}
	if o.once {
		if err := agent.PrintNodeGPUs(stdout, first); err != nil {
			return err
		}
		return agent.PrintReadings(stderr, first)
	}

	log, err := newLogger(&serveOptions{logLevel: o.logLevel, logFormat: o.logFormat})
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	client, err := agent.NewClient(o.kubeconfig, "faas-gpu-agent/"+version)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	var devices agent.DeviceLister
	if o.podResSock != "" {
		pr, err := agent.NewPodResources(o.podResSock, o.gpuResource, o.placeholdNS)
		if err != nil {
			return err
		}
		defer pr.Close()
		devices = pr
	}
	a, err := agent.New(agent.Config{
		Source:     src,
		Publisher:  agent.NewAnnotationPublisher(client, o.nodeName),
		ModelStore: o.modelStore,
		Devices:    devices,
		Interval:   o.interval,
		Log:        log,
		Metrics:    reg,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.metricsPort > 0 {
		stopMetrics, err := a.ServeMetrics(o.metricsPort, reg)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	log.Info("faas-gpu agent", zap.String("node", o.nodeName), zap.Duration("interval", o.interval),
		zap.String("annotation", gpu.AnnotationNodeGPUs), zap.String("version", version))
	return a.Run(ctx, first)
}
