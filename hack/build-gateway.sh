#!/usr/bin/env bash
# build-gateway.sh OUT_BIN
#
# Builds the real OpenFaaS gateway (module github.com/openfaas/faas/gateway)
# from the Go module proxy into OUT_BIN, for the end-to-end tests and for
# trying faas-gpu by hand. faas-cli cannot be built this way (the proxy
# refuses it), but the gateway can: `go install pkg@version` fails because
# the proxy refuses the version list, so the build goes through a throw-away
# module (`go get` + `go build`).
#
# The gateway is under the OpenFaaS CE EULA: its code and binary are built
# in a cache folder outside the checkout and must never be committed.
#
#   cache:  ${FAAS_GPU_CACHE:-$HOME/.cache/faas-gpu}/gateway
#   reuse:  a previous build is reused while the pinned version and the Go
#           toolchain are unchanged
#
# The gateway serves its UI from ./assets relative to its working directory.
# The script prints the assets folder and writes it, as one line, to
# OUT_BIN.assets; run the gateway with its working directory set to the
# parent of that folder (the gateway module's directory) so /ui/ works.
set -euo pipefail

GATEWAY_MODULE=github.com/openfaas/faas/gateway
# openfaas/faas commit 8d803bf9e265 (2026-07-02), see
# ../shared/reference/openfaas-provider-contract.md §4.3.
GATEWAY_VERSION=v0.0.0-20260702090804-8d803bf9e265

die() {
	echo "build-gateway.sh: $*" >&2
	exit 1
}

[[ $# -eq 1 && -n $1 ]] || die "usage: hack/build-gateway.sh OUT_BIN"
command -v go >/dev/null 2>&1 || die "the go command is not on PATH; install Go 1.24 or newer"

out=$1
out_dir=$(dirname -- "$out")
mkdir -p -- "$out_dir" || die "cannot create $out_dir"
out="$(cd -- "$out_dir" && pwd)/$(basename -- "$out")"

cache_root=${FAAS_GPU_CACHE:-${HOME:?HOME is not set; set FAAS_GPU_CACHE}/.cache/faas-gpu}
cache="$cache_root/gateway"
mkdir -p -- "$cache" || die "cannot create the cache folder $cache"
cache="$(cd -- "$cache" && pwd)"

# The throw-away module must not pick up a surrounding workspace or vendor
# folder; the caller's GOFLAGS stay, with the module mode forced (the last
# -mod wins) and no VCS stamping (the cache may sit inside some repository).
export GOWORK=off GO111MODULE=on
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod -buildvcs=false"

key="$GATEWAY_MODULE@$GATEWAY_VERSION $(go env GOVERSION) $(go env GOOS)/$(go env GOARCH)"
bin="$cache/gateway"
stamp="$cache/gateway.stamp"
assets_file="$cache/gateway.assets"

# One build at a time per cache (tests of several packages may run at once).
exec 9>"$cache/lock"
if command -v flock >/dev/null 2>&1; then
	flock 9 || die "cannot lock $cache/lock"
fi

fresh() {
	[[ -x $bin && -f $stamp && -f $assets_file ]] || return 1
	[[ "$(cat -- "$stamp")" == "$key" ]] || return 1
	[[ -d "$(cat -- "$assets_file")" ]] || return 1
}

if fresh; then
	echo "build-gateway.sh: reusing $bin ($GATEWAY_VERSION)" >&2
else
	echo "build-gateway.sh: building $GATEWAY_MODULE@$GATEWAY_VERSION in $cache/module" >&2
	mod="$cache/module"
	rm -rf -- "$mod" "$bin" "$stamp" "$assets_file"
	mkdir -p -- "$mod"
	cat >"$mod/go.mod" <<EOF
module faas-gpu.local/gateway-build

go 1.24
EOF
	cat >"$mod/README" <<EOF
Throw-away module made by faas-gpu's hack/build-gateway.sh to build the
OpenFaaS gateway ($GATEWAY_MODULE@$GATEWAY_VERSION, OpenFaaS CE EULA).
Safe to delete.
EOF
	(cd -- "$mod" && go get "$GATEWAY_MODULE@$GATEWAY_VERSION") ||
		die "go get $GATEWAY_MODULE@$GATEWAY_VERSION failed (is the Go module proxy reachable? GOPROXY=$(go env GOPROXY))"
	(cd -- "$mod" && go build -o "$bin.tmp" "$GATEWAY_MODULE") ||
		die "go build $GATEWAY_MODULE failed"
	mv -f -- "$bin.tmp" "$bin"
	dir=$(cd -- "$mod" && go list -m -f '{{.Dir}}' "$GATEWAY_MODULE") ||
		die "go list -m $GATEWAY_MODULE failed"
	[[ -d "$dir/assets" ]] || die "the gateway module at $dir has no assets/ folder: the UI would not work"
	echo "$dir/assets" >"$assets_file"
	echo "$key" >"$stamp"
fi

cp -f -- "$bin" "$out.tmp" || die "cannot write $out"
chmod +x -- "$out.tmp"
mv -f -- "$out.tmp" "$out"
assets=$(cat -- "$assets_file")
echo "$assets" >"$out.assets"
echo "build-gateway.sh: gateway at $out; run it from $(dirname -- "$assets") so /ui/ finds $assets" >&2
echo "$assets"
