# faas-gpu: one image for `serve` (the provider) and `agent` (the GPU node
# agent). cgo stays on: the agent opens libnvidia-ml through go-nvml, which
# the NVIDIA container runtime mounts into the agent's pod.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" -o /out/faas-gpu .

# glibc for cgo's dlopen; non-root, read-only root filesystem friendly.
FROM gcr.io/distroless/base-debian12:nonroot
COPY --from=build /out/faas-gpu /usr/local/bin/faas-gpu
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/faas-gpu"]
CMD ["serve"]
