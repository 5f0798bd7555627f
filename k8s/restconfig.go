package k8s

import (
	"fmt"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RestConfig decides whether the provider runs on Kubernetes and how it
// reaches the API server: an explicit kubeconfig file, else $KUBECONFIG,
// else the in-cluster service account when running in a pod
// ($KUBERNETES_SERVICE_HOST). ok is false when none applies: local mode.
func RestConfig(kubeconfig string) (cfg *rest.Config, ok bool, err error) {
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if kubeconfig != "" {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, true, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	} else if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, true, fmt.Errorf("in-cluster configuration: %w", err)
		}
	} else {
		return nil, false, nil
	}
	cfg.UserAgent = "faas-gpu"
	// The defaults (5 QPS, burst 10) throttle a burst of deploys.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, true, nil
}
