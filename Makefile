# The two commands of the README: `make run` and `make test`.
GO ?= go
BIN := bin/faas-gpu
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: build run test vet bench bench-sim clean manifests check-manifests

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

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The published simulator runs of docs/evaluation.md: tables on stdout, CSV
# and SVG in docs/evaluation/ (needs ../shared/data/rapp-v100-latency.csv).
bench-sim: build
	./$(BIN) simulate -quiet -scenario consolidation -out docs/evaluation
	./$(BIN) simulate -quiet -scenario throughput -out docs/evaluation
	./$(BIN) simulate -quiet -scenario throughput -max-batch 1 -name throughput-batch1 -out docs/evaluation
	./$(BIN) simulate -quiet -scenario locality -out docs/evaluation
	./$(BIN) simulate -quiet -scenario cost -out docs/evaluation
	./$(BIN) simulate -quiet -scenario cost -slo-margin 0.5 -name cost-margin -out docs/evaluation
	./$(BIN) simulate -quiet -scenario scale -out docs/evaluation

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
