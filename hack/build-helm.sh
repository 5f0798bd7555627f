#!/usr/bin/env bash
# build-helm.sh [OUT_BIN]
#
# Builds helm (helm.sh/helm/v3/cmd/helm) from the Go module proxy, for
# `make manifests`, `make check-manifests` and the chart tests
# (test/chart). No helm release binary is downloaded: the same Go module
# proxy that builds faas-gpu builds helm, so a fresh machine with Go and
# the proxy needs nothing else.
#
#   cache:  ${FAAS_GPU_CACHE:-$HOME/.cache/faas-gpu}/helm-v3.22.0/helm
#   reuse:  a previous build is reused while the pinned helm version, the
#           Kubernetes version it reports and the Go toolchain are unchanged
#   output: the helm path, on stdout (one line); progress goes to stderr.
#           With OUT_BIN, helm is also copied there.
#
# helm's version and its default Kubernetes version are link-time
# variables: without the -X flags below `helm version` says v3.22 only by
# its module, and `.Capabilities.KubeVersion` in `helm template` and
# `helm lint` is v1.20.0, far older than any cluster faas-gpu supports.
# They are set to the Kubernetes version the project's test control plane
# runs (../shared/tools/k8s-testenv/build.sh: 1.37).
#
# Cold build: about 60 s on two cores with a warm module cache; a reuse
# takes milliseconds.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-3.22.0}
K8S_MAJOR=1
K8S_MINOR=${HELM_K8S_MINOR:-37}

die() {
	echo "build-helm.sh: $*" >&2
	exit 1
}

[[ $# -le 1 ]] || die "usage: hack/build-helm.sh [OUT_BIN]"
command -v go >/dev/null 2>&1 || die "the go command is not on PATH; install Go 1.24 or newer"

cache_root=${FAAS_GPU_CACHE:-${HOME:?HOME is not set; set FAAS_GPU_CACHE}/.cache/faas-gpu}
cache="$cache_root/helm-v$HELM_VERSION"
mkdir -p -- "$cache" || die "cannot create the cache folder $cache"
cache="$(cd -- "$cache" && pwd)"
bin="$cache/helm"
stamp="$cache/helm.stamp"

# `go install pkg@version` ignores the surrounding module; keep a caller's
# GOFLAGS out of it (-mod=vendor would be refused) and build outside any
# repository so no VCS stamping happens. CGO is not needed by helm.
export GOWORK=off GO111MODULE=on GOFLAGS=-buildvcs=false CGO_ENABLED=0

ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
	ldflags+=" -X $p.k8sVersionMajor=$K8S_MAJOR -X $p.k8sVersionMinor=$K8S_MINOR"
done
key="helm.sh/helm/v3@v$HELM_VERSION k8s $K8S_MAJOR.$K8S_MINOR $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"

# One build at a time per cache (tests of several packages may run at once).
exec 9>"$cache/lock"
if command -v flock >/dev/null 2>&1; then
	flock 9 || die "cannot lock $cache/lock"
fi

fresh() {
	[[ -x $bin && -f $stamp ]] || return 1
	[[ "$(cat -- "$stamp")" == "$key" ]] || return 1
}

if fresh; then
	echo "build-helm.sh: reusing $bin (v$HELM_VERSION)" >&2
else
	echo "build-helm.sh: building helm v$HELM_VERSION (Kubernetes $K8S_MAJOR.$K8S_MINOR) into $cache; about a minute cold" >&2
	rm -f -- "$bin" "$stamp"
	tmp="$cache/.gobin"
	rm -rf -- "$tmp"
	mkdir -p -- "$tmp"
	t0=$SECONDS
	(cd -- "$cache" && GOBIN="$tmp" go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION") ||
		die "go install helm.sh/helm/v3/cmd/helm@v$HELM_VERSION failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
	[[ -x $tmp/helm ]] || die "go install wrote no helm binary into $tmp"
	got=$("$tmp/helm" version --template '{{.Version}}' 2>/dev/null) || die "the built helm does not run"
	[[ $got == "v$HELM_VERSION" ]] || die "the built helm reports version $got, not v$HELM_VERSION: the -X flags no longer match helm's source"
	mv -f -- "$tmp/helm" "$bin"
	rm -rf -- "$tmp"
	echo "$key" >"$stamp"
	echo "build-helm.sh: built in $((SECONDS - t0)) s" >&2
fi

if [[ $# -eq 1 ]]; then
	out=$1
	mkdir -p -- "$(dirname -- "$out")" || die "cannot create $(dirname -- "$out")"
	cp -f -- "$bin" "$out.tmp" || die "cannot write $out"
	chmod +x -- "$out.tmp"
	mv -f -- "$out.tmp" "$out"
	bin="$(cd -- "$(dirname -- "$out")" && pwd)/$(basename -- "$out")"
fi
echo "$bin"
