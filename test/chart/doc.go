// Package chart tests the Helm chart chart/faas-gpu and the manifests in
// yaml/ rendered from it, without a cluster: helm (built from the Go module
// proxy by hack/build-helm.sh, into a cache outside the checkout) lints the
// chart and renders it with its default values and with each optional
// switch; the tests decode every rendered object and check what the
// provider, the agent and the MPS daemon need to work: the OpenFaaS
// variables, the flags of `faas-gpu serve` and `faas-gpu agent`, least-
// privilege RBAC, the downward API, the MPS pipe directory, the profiles,
// the Grafana dashboard's metrics (against handlers' own metric
// descriptions) and that yaml/ is what the chart renders now.
//
// Installing the chart into a real API server is the Kubernetes tests' part.
package chart
