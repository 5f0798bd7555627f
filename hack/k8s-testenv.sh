#!/usr/bin/env bash
# k8s-testenv.sh: builds a real, Docker-free Kubernetes control plane for
# faas-gpu's tests (test/k8s) from the Go module proxy, and prints the folder
# holding the binaries.
#
#   hack/k8s-testenv.sh            # build if needed; the last line of stdout is the bin dir
#
# The bin dir holds etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok and kwok-stages.yaml (fake kubelets: nodes
# Ready, pods Running), and is usable as KUBEBUILDER_ASSETS. It lives in
# ${FAAS_GPU_CACHE:-$HOME/.cache/faas-gpu}/k8s-<hash of this script>, so a
# changed script builds afresh and a warm run takes seconds. A cold build is
# about 9 minutes on 2 cores (2.7 GB peak memory per compile); with a warm Go
# build cache about 25 s.
#
# Needs go >= 1.26 and the Go module proxy. Honours GOMODCACHE, GOCACHE and
# GOFLAGS. Pins: K8S_VERSION, ETCD_VERSION, KWOK_VERSION below (overriding them
# with the environment builds into a different folder).
#
# Facts behind it (see also ../shared/tools/k8s-testenv/README.md):
# - `go install k8s.io/kubernetes/cmd/...@v` is refused (replace directives):
#   a wrapper module requires k8s.io/kubernetes and replaces each ./staging
#   module with the published v0.<minor>.<patch>. Always pin the version in
#   `go get -tool`, or it upgrades k8s.io/kubernetes and the pins mismatch.
# - Without the -X version flags the binaries say v0.0.0-master and kubectl
#   refuses to talk to them.
# - etcd's server/v3 needs a wrapper module too.
# - kwok (not kwokctl) has no built-in stages: kwokctl's defaults are copied
#   from its module.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.37.2}
ETCD_VERSION=${ETCD_VERSION:-3.7.3}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
K8S_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubectl"
BINS="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok kwok-stages.yaml"

die() {
	echo "k8s-testenv.sh: $*" >&2
	exit 1
}
command -v go >/dev/null 2>&1 || die "the go command is not on PATH; install Go 1.26 or newer"

self="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/$(basename -- "${BASH_SOURCE[0]}")"
hash=$( (cat -- "$self"; echo "$K8S_VERSION $ETCD_VERSION $KWOK_VERSION $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)") |
	sha256sum | cut -c1-12)
cache_root=${FAAS_GPU_CACHE:-${HOME:?HOME is not set; set FAAS_GPU_CACHE}/.cache/faas-gpu}
OUT="$cache_root/k8s-$hash"
mkdir -p -- "$OUT" || die "cannot create $OUT"
OUT="$(cd -- "$OUT" && pwd)"

complete() {
	[[ -f $OUT/.complete ]] || return 1
	for b in $BINS; do [[ -s $OUT/$b ]] || return 1; done
}

# Test packages may run this at the same time: one build per folder.
exec 9>"$OUT/.lock"
if command -v flock >/dev/null 2>&1; then
	flock 9 || die "cannot lock $OUT/.lock"
fi

if complete; then
	echo "k8s-testenv.sh: reusing $OUT" >&2
	echo "$OUT"
	exit 0
fi

export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 GOWORK=off GO111MODULE=on
# The wrapper modules live in the cache, maybe inside some repository: no VCS
# stamping; module mode whatever the caller's GOFLAGS say (the last -mod wins).
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -buildvcs=false"
SRC=$OUT/.src
mkdir -p -- "$SRC"
T0=$SECONDS
step() { echo "== k8s-testenv.sh [$((SECONDS - T0))s] $*" >&2; }
moddir() { go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'; }

# ---------------------------------------------------------------- kubernetes
step "kubernetes v$K8S_VERSION: wrapper module"
IFS=. read -r KMAJ KMIN KPATCH <<<"$K8S_VERSION"
KDIR=$(moddir "k8s.io/kubernetes@v$K8S_VERSION")
[[ -f $KDIR/go.mod ]] || die "go mod download k8s.io/kubernetes@v$K8S_VERSION failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
mkdir -p -- "$SRC/k8s"
(
	cd -- "$SRC/k8s"
	{
		printf 'module faas-gpu.local/k8s-bins\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S_VERSION"
		# every ./staging replace of k8s.io/kubernetes becomes the published staging module
		awk -v v="v0.$KMIN.$KPATCH" '/^replace \(/{f=1;next} f&&/^\)/{f=0} f&&/=> *\.\/staging/{print "\t"$1" => "$1" "v}' "$KDIR/go.mod"
		echo ")"
	} >go.mod
	pkgs=()
	for c in $K8S_CMDS; do pkgs+=("k8s.io/kubernetes/cmd/$c@v$K8S_VERSION"); done
	go get -tool "${pkgs[@]}"
) || die "the kubernetes wrapper module failed"

VLD=""
for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
	VLD+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=$KMAJ -X $p.gitMinor=$KMIN -X $p.gitTreeState=clean"
	# a fixed date keeps the link reproducible, so a rebuild reuses the cache
	VLD+=" -X $p.buildDate=1970-01-01T00:00:00Z"
done
step "kubernetes: go build $K8S_CMDS"
pkgs=()
for c in $K8S_CMDS; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
(cd -- "$SRC/k8s" && go build -ldflags "-s -w $VLD" -o "$OUT/" "${pkgs[@]}") || die "go build of $K8S_CMDS failed"

# ---------------------------------------------------------------- etcd
step "etcd v$ETCD_VERSION"
mkdir -p -- "$SRC/etcd"
(
	cd -- "$SRC/etcd"
	printf 'module faas-gpu.local/etcd-bin\n\ngo 1.26.0\n' >go.mod
	go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
	go build -ldflags "-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
) || die "the etcd build failed"

# ---------------------------------------------------------------- kwok
step "kwok v$KWOK_VERSION"
GOBIN="$OUT" go install -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" || die "go install kwok failed"
WDIR=$(moddir "sigs.k8s.io/kwok@v$KWOK_VERSION")
# kwokctl's default stages: nodes Ready at once with a Lease heartbeat, pods
# Ready at once, completed and deleted pods cleaned up.
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
	[[ -f $WDIR/kustomize/stage/$f ]] || die "kwok v$KWOK_VERSION has no stage $f"
	echo "---"
	cat -- "$WDIR/kustomize/stage/$f"
done >"$OUT/kwok-stages.yaml.tmp"
mv -f -- "$OUT/kwok-stages.yaml.tmp" "$OUT/kwok-stages.yaml"

for b in $BINS; do [[ -s $OUT/$b ]] || die "$OUT/$b is missing after the build"; done
touch -- "$OUT/.complete"
step "done: $OUT"
echo "$OUT"
