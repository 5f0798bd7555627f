# The two commands of the README: `make run` and `make test`.
GO ?= go
BIN := bin/faas-gpu
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# go-nvml's nvml.h marks dozens of functions DEPRECATED(13.0) and its cgo
# prolog calls each of them, so every fresh compile of that package (a
# -race build, a binary a test builds) prints hundreds of warning lines that
# bury a failing test. Go has no per-package CGO_CFLAGS and the #cgo lines
# are in go-nvml's own source, so the flag goes to every cgo compile of the
# build: besides go-nvml that is only the standard library's C (runtime/cgo,
# net, os/user), which calls nothing deprecated. It is exported so that the
# binaries the tests build (test/e2e) get it too; go env's value is kept.
ifeq ($(origin CGO_CFLAGS),undefined)
CGO_CFLAGS := $(shell $(GO) env CGO_CFLAGS)
endif
CGO_CFLAGS += -Wno-deprecated-declarations
export CGO_CFLAGS

.PHONY: build run test vet bench bench-sim clean manifests check-manifests check-cgo-warnings

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) .

# The local provider on port 8081, so an OpenFaaS gateway can take 8080.
run: build
	port=$${port:-8081} ./$(BIN) serve $(ARGS)

vet:
	$(GO) vet ./...
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

# Every test, race detector on. The end-to-end tests build the real
# OpenFaaS gateway from the Go module proxy (hack/build-gateway.sh).
test: vet
	$(GO) test -race -count=1 -timeout 30m ./...

# Fails when compiling go-nvml prints a warning. The define unique to this
# run makes the compile real: a cached package prints nothing, so the check
# could not fail. It compiles go-nvml's large cgo prolog afresh (9-15 s),
# too slow for every make test; .ci/run runs it once.
check-cgo-warnings:
	@set -e; log=$$(mktemp); trap 'rm -f "$$log"' EXIT; \
	CGO_CFLAGS="$(CGO_CFLAGS) -DFAAS_GPU_CGO_CHECK=$$(date +%s%N)" $(GO) build -o /dev/null github.com/NVIDIA/go-nvml/pkg/nvml 2>"$$log"; \
	if grep -qi 'warning\|deprecated' "$$log"; then \
		echo "check-cgo-warnings: compiling go-nvml printed $$(grep -ci warning "$$log") warnings with CGO_CFLAGS=$(CGO_CFLAGS):" >&2; \
		head -5 "$$log" >&2; exit 1; \
	fi; echo "check-cgo-warnings: go-nvml compiles without warnings"

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The published simulator runs of docs/evaluation.md: tables on stdout, CSV
# and SVG in $(BENCH_OUT) (needs ../shared/data/rapp-v100-latency.csv), then
# the sweeps and ablations it quotes, on stdout only. They run with the
# built-in contention model; ARGS="-contention off" gives the "before"
# column (with BENCH_OUT=DIR, so the published files stay), ARGS="-contention
# FILE" a measured table. Later flags win, so ARGS overrides a run's own.
BENCH_OUT ?= docs/evaluation
# DRAWN_SUITES are sim/family.go's and sim/zoo.go's draws (familyDraws,
# then zooDraws), in the order they were made, as the built simulator
# lists them (a shell command the recipe runs once the binary is built;
# DRAWN_SUITES="family3 zoo" runs only those).
DRAWN_SUITES ?= $$(./$(BIN) simulate -list-suites | grep -v '^heldout$$')
bench-sim: build
	./$(BIN) simulate -quiet -scenario consolidation -out $(BENCH_OUT) $(ARGS)
	./$(BIN) simulate -quiet -scenario throughput -out $(BENCH_OUT) $(ARGS)
	./$(BIN) simulate -quiet -scenario throughput -max-batch 1 -name throughput-batch1 -out $(BENCH_OUT) $(ARGS)
	./$(BIN) simulate -quiet -scenario locality -out $(BENCH_OUT) $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -out $(BENCH_OUT) $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -slo-margin 0.5 -name cost-margin -out $(BENCH_OUT) $(ARGS)
	./$(BIN) simulate -quiet -scenario scale -out $(BENCH_OUT) $(ARGS)
	@# Run 2's sweeps.
	for a in "-rate 5" "-rate 10" "-rate 40" "-models largest:10" "-models largest:20" "-models largest:50" "-models largest:69" "-models spread:35"; do \
		./$(BIN) simulate -quiet -scenario locality -policies lb,lalb,lalb-o3,faas-gpu $$a $(ARGS) || exit 1; done
	@# Run 3's ablations (-slo-margin 2 -no-backlog: the commit-22797cd row).
	./$(BIN) simulate -quiet -scenario cost -policies faas-gpu -no-backlog $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -policies faas-gpu -no-backlog -slo-margin 2 $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -policies faas-gpu -slo-factor 1.75 $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -policies faas-gpu -slo-margin 0.8 $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -policies faas-gpu -slo-margin 0.6 $(ARGS)
	@# Fair baselines: the LB family's smallest clusters, fast-gshare's readings.
	for g in 16 24 26 28 30 31 32; do \
		./$(BIN) simulate -quiet -scenario cost -policies lb,lalb,lalb-o3 -gpus $$g $(ARGS) || exit 1; done
	./$(BIN) simulate -quiet -scenario cost -policies fast-gshare -fast-scale-up 0.9 $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -policies fast-gshare -fast-scale-up 0.9 -slo-margin 0.5 $(ARGS)
	@# Run 4: step-load ablations and all six policies at scale (about 90 s).
	./$(BIN) simulate -quiet -scenario scale -warmup 30s $(ARGS)
	./$(BIN) simulate -quiet -scenario scale -no-backlog $(ARGS)
	./$(BIN) simulate -quiet -scenario scale -no-backlog -warmup 30s $(ARGS)
	./$(BIN) simulate -quiet -scenario scale -policies all $(ARGS)
	@# The held-out suite of issue 12: as shipped (queueing capacity, right-sizing, resizing,
	@# parked processes), and without the queueing capacity (-no-queueing). The ablations
	@# park nothing, as they did when they were measured, before parking was the default.
	./$(BIN) simulate -quiet -suite heldout -out $(BENCH_OUT) $(ARGS)
	./$(BIN) simulate -quiet -suite heldout -no-queueing -parked 0 -policies faas-gpu -out $(BENCH_OUT)/no-queueing $(ARGS)
	@# Without standbys (docs/evaluation.md, "Standbys"): the suite and the cost run.
	./$(BIN) simulate -quiet -suite heldout -no-standby -parked 0 -policies faas-gpu -out $(BENCH_OUT)/no-standby $(ARGS)
	./$(BIN) simulate -quiet -scenario cost -no-standby -parked 0 -policies faas-gpu $(ARGS)
	@# The family and zoo suites: workloads drawn at random over the held-out family,
	@# not tuned on (family2 to family32 and the zoo draws not even looked at before their first runs; the last of each, family33 and zoo14, not yet run).
	for s in $(DRAWN_SUITES); do \
		./$(BIN) simulate -quiet -suite $$s -out $(BENCH_OUT) $(ARGS) || exit 1; \
	done
	@# The same suite on arrivals drawn from other seeds: a change that helps
	@# only seed 12's draws is tuned to them (docs/evaluation.md, "Other seeds").
	for s in 13 14 15 16; do \
		./$(BIN) simulate -quiet -suite heldout -policies faas-gpu -seed $$s -out $(BENCH_OUT)/seed$$s $(ARGS) || exit 1; done
	@# Nothing parked (com.openfaas.gpu.parked: "0" on every function; docs/evaluation.md,
	@# "Parked processes by default"): what the default was until it parked, and what the
	@# Kubernetes backend, which cannot park, would do. The held-out suite, its other
	@# seeds and the drawn suites.
	./$(BIN) simulate -quiet -suite heldout -policies faas-gpu -parked 0 -out $(BENCH_OUT)/parked-none $(ARGS)
	for s in 13 14 15 16; do \
		./$(BIN) simulate -quiet -suite heldout -policies faas-gpu -parked 0 -seed $$s -out $(BENCH_OUT)/parked-none/seed$$s $(ARGS) || exit 1; done
	for s in $(DRAWN_SUITES); do \
		./$(BIN) simulate -quiet -suite $$s -policies faas-gpu -parked 0 -out $(BENCH_OUT)/parked-none $(ARGS) || exit 1; \
	done

clean:
	rm -rf bin

# yaml/faas-gpu.yaml: the Helm chart rendered with its default values (helm
# v3.22.0, built from the Go module proxy by hack/build-helm.sh and cached).
manifests:
	@set -e; helm=$$(hack/build-helm.sh); \
	$$helm lint --strict chart/faas-gpu; \
	$$helm template faas-gpu chart/faas-gpu --namespace openfaas > yaml/faas-gpu.yaml.tmp; \
	mv yaml/faas-gpu.yaml.tmp yaml/faas-gpu.yaml; \
	echo "wrote yaml/faas-gpu.yaml"

# Fails when yaml/ is not what the chart renders now (test/chart checks it too).
check-manifests:
	@set -e; helm=$$(hack/build-helm.sh); \
	$$helm lint --strict chart/faas-gpu; \
	tmp=$$(mktemp); trap 'rm -f "$$tmp"' EXIT; \
	$$helm template faas-gpu chart/faas-gpu --namespace openfaas > "$$tmp"; \
	diff -u yaml/faas-gpu.yaml "$$tmp" || { echo "check-manifests: yaml/faas-gpu.yaml is stale: run make manifests" >&2; exit 1; }
