#!/usr/bin/env bash
# gpu-check.sh: faas-gpu end to end on a machine with a real NVIDIA GPU, in
# under 8 minutes by plan (a lent machine gives 15 in all, start-up
# included). It first prints its plan: each step's time estimate, made from
# the settings below, and when it would end. Steps 1-4 set up, then the
# measuring steps run in order of value, 8, 7, 5, 6, and one that would end
# past GPU_CHECK_BUDGET_S (default 450) is not started: the run says so and
# ends with each step's time against its estimate. It
#   1. builds faas-gpu (or takes FAAS_GPU_BIN: GPU machines often have no Go
#      or no network),
#   2. prints what `faas-gpu agent -once` discovers with NVML,
#   3. starts the CUDA MPS control daemon when there is one (and stops it),
#   4. runs `faas-gpu serve` locally (NVML inventory),
#   8. the pytorch-gpu template (template/, docs/gpu-template.md) with the
#      example classifier (examples/pytorch-classifier, TEMPLATE_MODEL),
#      run from its build folder as local mode runs it: one call, then
#      `faas-gpu profile` at TEMPLATE_SHARES and batch 1 and 8, its profile
#      printed (about 2.5 minutes). GPU_CHECK_ONLY=template runs steps 1, 3,
#      4 and 8 only.
#   7. the co-location experiment (about 2 minutes): 1, 2, 4 and 8 MPS
#      clients of one model and of two (COLOC_MODELS), at 100/n % SM each
#      and one uneven split (75/25), at batch 1 and 8, each client alone
#      (its neighbours idle) and then all together; the clients of one
#      count start once and serve every configuration and batch of that
#      count. It writes colocation.csv (every client's latency and
#      throughput, alone and together) and contention.csv, the table
#      `faas-gpu simulate -contention FILE` reads (docs/evaluation.md,
#      "Contention"). GPU_CHECK_ONLY=colocate runs steps 3 and 7 only.
#   5. through the provider API, deploys a process function doing a fixed
#      amount of real GPU work per request at SM_SHARES (com.openfaas.gpu.sm),
#      drives each for DURATION seconds with bounded concurrency and prints
#      the throughput at each share; halfway through each, it prints what
#      `agent -once` reads under load (utilisation, each process's memory),
#   6. profiles a real PyTorch model (torchvision's PROFILE_MODEL, fp16,
#      random weights: nothing to download) with `faas-gpu profile` at
#      PROFILE_SHARES and prints the profile it writes.
# Steps 6-8 need python3 with PyTorch with CUDA and torchvision.
# Without MPS the SM share cannot bite: expect the same req/s at every share.
#
# The GPU work, in this order of preference (GPU_WORK picks one):
#   nvcc   a CUDA C kernel of independent FMA chains, built with nvcc into a
#          shared library: pure SM-bound work, no framework in the way
#   torch  fp16 4096x4096 matrix products with PyTorch
#   cupy   the same with CuPy
# The function itself is a small Python HTTP server (of-watchdog http mode),
# so python3 is needed in every case.
#
# Environment:
#   FAAS_GPU_BIN   faas-gpu binary to use instead of building one
#   GPU_CHECK_BUDGET_S  seconds the run may plan for (default 450): a step
#                  whose estimate would end past it is skipped; past it and
#                  a minute more the run stops itself (and cleans up)
#   GPU_CHECK_PLAN=1  print the plan and exit: nothing is started
#   GPU_WORK       nvcc, torch or cupy (default: the first that works)
#   SM_SHARES      SM percentages of step 5 (default "10 25 50 100")
#   DURATION       seconds of load per share in step 5 (default 10)
#   CONCURRENCY    requests in flight (default 4)
#   TARGET_MS      GPU time of one request at 100 % SM; the work per request
#                  is calibrated to it once, then fixed (default 25)
#   PROFILE_MODEL  torchvision model to profile in step 6 (default resnet50;
#                  "none" skips the step)
#   PROFILE_SHARES SM percentages of step 6 (default "25 100")
#   PROFILE_DURATION  seconds per profiling phase of step 6 (default 3)
#   PROFILE_OUT    folder to copy the written profiles into (default: none)
#   COLOC_MODELS   the two torchvision models of step 7 (default
#                  "resnet50 mobilenet_v2"; "none" skips the step)
#   COLOC_CLIENTS  client counts (default "1 2 4 8")
#   COLOC_BATCHES  batch sizes (default "1 8")
#   COLOC_PHASE    seconds of each alone and together phase (default 2)
#   COLOC_OUT      folder to copy colocation.csv and contention.csv into
#   GPU_CHECK_ONLY=colocate  steps 3 and 7 only
#   GPU_CHECK_ONLY=template  steps 1, 3, 4 and 8 only
#   TEMPLATE_MODEL torchvision classifier of step 8 (default resnet50;
#                  "none" skips the step)
#   TEMPLATE_SHARES  SM percentages of step 8 (default "25 50 100")
#   TEMPLATE_DURATION  seconds per profiling phase of step 8 (default 2)
#   TEMPLATE_SIZE  image side the classifier resizes to (default 224)
#   KEEP=1         keep the temporary folder (logs) instead of removing it
#   GPU_CHECK_DRY_RUN=1  no GPU needed: a CPU stand-in for the work and the
#                  built-in inventory; checks this script's plumbing only
#
# Everything lives in one temporary folder; every process started here is
# stopped on exit, also on Ctrl-C.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SM_SHARES=${SM_SHARES:-"10 25 50 100"}
DURATION=${DURATION:-10}
CONCURRENCY=${CONCURRENCY:-4}
TARGET_MS=${TARGET_MS:-25}
DRY_RUN=${GPU_CHECK_DRY_RUN:-0}
ONLY=${GPU_CHECK_ONLY:-}
[[ -z $ONLY || $ONLY == colocate || $ONLY == template ]] || { echo "gpu-check: GPU_CHECK_ONLY=$ONLY: only colocate and template are known" >&2; exit 2; }
COLOC_PHASE=${COLOC_PHASE:-2}
PROFILE_DURATION=${PROFILE_DURATION:-3}
PROFILE_SHARES=${PROFILE_SHARES:-"25 100"}
TEMPLATE_DURATION=${TEMPLATE_DURATION:-2}
BUDGET=${GPU_CHECK_BUDGET_S:-450}
PLAN_ONLY=${GPU_CHECK_PLAN:-0}
[[ $BUDGET =~ ^[0-9]+$ ]] || { echo "gpu-check: GPU_CHECK_BUDGET_S=$BUDGET: want whole seconds" >&2; exit 2; }
for v in DURATION COLOC_PHASE PROFILE_DURATION TEMPLATE_DURATION; do
	[[ ${!v} =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "gpu-check: $v=${!v}: want seconds" >&2; exit 2; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/faas-gpu-check.XXXXXX")

serve_pid=""
child=""
load_pid=""
deadline_pid=""
times=()
mps_started=0
mps_pipe="$work/mps-pipe"
mkdir -p "$work/pids" "$work/state"

log() { printf '\n== %s\n' "$*"; }

# report_times prints, once, each step's time against its estimate and the
# steps the budget skipped: what the next lent machine's plan learns from.
report_times() {
	((${#times[@]})) || return 0
	printf '\n== time per step (%d s in all; budget %d s, GPU_CHECK_BUDGET_S)\n' "$SECONDS" "$BUDGET"
	printf '  %s\n' "${times[@]}"
	times=()
}
die() {
	printf 'gpu-check: %s\n' "$*" >&2
	exit 1
}

# stop_pid sends TERM, waits up to $2 seconds, then KILLs.
stop_pid() {
	local pid=$1 grace=${2:-5} i
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < grace * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

# run_bg runs a command in the background and waits for it: a signal then
# reaches the trap at once, not after the command has finished.
run_bg() {
	local rc=0
	"$@" &
	child=$!
	wait "$child" || rc=$?
	child=""
	return "$rc"
}

cleanup() {
	local status=$? f
	trap - EXIT INT TERM
	if [[ -n $child ]]; then
		stop_pid "$child" 2
	fi
	if [[ -n $load_pid ]]; then
		stop_pid "$load_pid" 2
	fi
	if [[ -n $deadline_pid ]]; then
		kill "$deadline_pid" 2>/dev/null || true
	fi
	report_times
	# The provider stops its replicas on SIGTERM; the functions also record
	# their pids, in case it could not.
	if [[ -n $serve_pid ]]; then
		stop_pid "$serve_pid" 15
	fi
	for f in "$work"/pids/*; do
		[[ -e $f ]] && stop_pid "$(basename "$f")" 2
	done
	if ((mps_started)); then
		echo quit | CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" nvidia-cuda-mps-control >/dev/null 2>&1 || true
	fi
	if ((status != 0)) && [[ -f $work/serve.log ]]; then
		printf '\n== last lines of the provider log\n' >&2
		tail -n 40 "$work/serve.log" >&2 || true
	fi
	if [[ ${KEEP:-0} == 1 ]]; then
		echo "logs kept in $work"
	else
		rm -rf "$work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

command -v python3 >/dev/null || die "python3 is needed (the function is a small Python HTTP server)"
command -v curl >/dev/null || die "curl is needed"

# ---------------------------------------------------------------- the function
cat >"$work/gpu-work.py" <<'PY'
"""A GPU function for faas-gpu's check: of-watchdog http mode on $port.

POST /?iters=N does N units of GPU work and answers how long they took.
GET answers without touching the GPU (the provider's readiness probe).
"""
import ctypes
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse


def backend(kind):
    """Returns run(iters) and a default iters for about a millisecond."""
    if kind == "nvcc":
        lib = ctypes.CDLL(os.environ["GPU_WORK_LIB"])
        lib.work.argtypes = [ctypes.c_long]
        lib.work.restype = ctypes.c_int
        lib.work_init.restype = ctypes.c_int
        lib.work_error.restype = ctypes.c_char_p
        if lib.work_init() != 0:
            raise RuntimeError("CUDA init: " + lib.work_error().decode())

        def run(iters):
            if lib.work(iters) != 0:
                raise RuntimeError("CUDA: " + lib.work_error().decode())

        return run, 4000
    if kind == "torch":
        import torch

        a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
        c = torch.empty_like(a)

        def run(iters):
            for _ in range(iters):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()

        return run, 8
    if kind == "model":  # a real network: one forward pass per unit
        import torch
        import torchvision

        batch = int(os.environ.get("FAAS_GPU_BATCH") or 1)
        net = getattr(torchvision.models, os.environ.get("MODEL", "resnet50"))(weights=None)
        net = net.cuda().eval().half()
        x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)

        def run(iters):
            with torch.inference_mode():
                for _ in range(iters):
                    net(x)
            torch.cuda.synchronize()

        return run, 1
    if kind == "cupy":
        import cupy

        a = cupy.random.random((4096, 4096)).astype(cupy.float16)
        b = cupy.random.random((4096, 4096)).astype(cupy.float16)
        c = cupy.empty_like(a)

        def run(iters):
            for _ in range(iters):
                cupy.matmul(a, b, out=c)
            cupy.cuda.Device().synchronize()

        return run, 8
    if kind == "cpu":  # GPU_CHECK_DRY_RUN: plumbing only

        def run(iters):
            x = 0
            for i in range(iters * 20000):
                x += i

        return run, 1
    raise SystemExit("unknown GPU_WORK " + kind)


def main():
    kind = os.environ.get("GPU_WORK", "torch")
    sm = os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "")
    run, default_iters = backend(kind)
    run(default_iters)  # warm-up: context, kernels, cuBLAS handles
    if "--probe" in sys.argv:
        print("probe ok: %s, SM %s" % (kind, sm or "(no MPS limit)"))
        return
    # The script stops every pid recorded here on exit, should the
    # provider not have stopped its replicas.
    pids = os.environ.get("GPU_CHECK_PIDS")
    if pids:
        open(os.path.join(pids, str(os.getpid())), "w").close()

    class Handler(BaseHTTPRequestHandler):
        def reply(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self.reply(200, {"backend": kind, "sm": sm})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            q = parse_qs(urlparse(self.path).query)
            try:
                iters = max(1, int(q.get("iters", [default_iters])[0]))
            except ValueError:
                self.reply(400, {"error": "iters must be an integer"})
                return
            t0 = time.perf_counter()
            try:
                run(iters)
            except Exception as e:  # report, keep serving
                print("work failed: %s" % e, file=sys.stderr, flush=True)
                self.reply(500, {"error": str(e)})
                return
            ms = (time.perf_counter() - t0) * 1000
            self.reply(200, {"gpu_ms": ms, "iters": iters, "sm": sm, "backend": kind, "pid": os.getpid()})

        def log_message(self, *args):
            pass

    port = int(os.environ["port"])
    print("gpu-work: %s on GPU %s, SM %s, memory limit %s, port %d" % (
        kind, os.environ.get("CUDA_VISIBLE_DEVICES", "-"), sm or "(no MPS limit)",
        os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "-"), port), flush=True)
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()


main()
PY

cat >"$work/work.cu" <<'CU'
// SM-bound work: many blocks of independent FMA chains, so the time of one
// launch falls in proportion to the SMs MPS lets it use.
#include <cuda_runtime.h>

__global__ void fma_chains(float *out, long iters) {
  float a = threadIdx.x * 1e-3f, b = blockIdx.x * 1e-3f, c = 0.5f, d = 0.25f;
  for (long i = 0; i < iters; i++) {
    a = fmaf(a, 0.9999f, 0.001f);
    b = fmaf(b, 0.9999f, 0.002f);
    c = fmaf(c, 0.9999f, 0.003f);
    d = fmaf(d, 0.9999f, 0.004f);
  }
  if (a + b + c + d == 42.0f) out[0] = a;  // keeps the loop from being removed
}

static float *buf;
static cudaError_t last = cudaSuccess;

extern "C" int work_init(void) {
  last = cudaMalloc(&buf, sizeof(float));  // creates the context
  return last == cudaSuccess ? 0 : -1;
}

extern "C" int work(long iters) {
  fma_chains<<<8192, 256>>>(buf, iters);
  last = cudaGetLastError();
  if (last == cudaSuccess) last = cudaDeviceSynchronize();
  return last == cudaSuccess ? 0 : -1;
}

extern "C" const char *work_error(void) { return cudaGetErrorString(last); }
CU

# ------------------------------------------------------------- the load driver
cat >"$work/load.py" <<'PY'
"""calibrate URL ITERS TARGET_MS -> iters; warm URL ITERS; load URL SECONDS CONCURRENCY ITERS -> JSON."""
import json
import statistics
import sys
import threading
import time
import urllib.request


def post(url, iters):
    req = urllib.request.Request("%s?iters=%d" % (url, iters), data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


mode, url = sys.argv[1], sys.argv[2]
if mode == "calibrate":
    iters, target = int(sys.argv[3]), float(sys.argv[4])
    ms = statistics.median(post(url, iters)["gpu_ms"] for _ in range(5))
    # Grow in steps: a tiny first sample is mostly launch overhead.
    for _ in range(16):
        if ms >= target / 4:
            break
        iters *= 4
        ms = statistics.median(post(url, iters)["gpu_ms"] for _ in range(3))
    print(max(1, round(iters * target / ms)))
    sys.exit(0)
if mode == "warm":
    for _ in range(2):
        post(url, int(sys.argv[3]))
    sys.exit(0)

seconds, concurrency, iters = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
lock = threading.Lock()
lat, gpu, errors = [], [], []
start = time.monotonic()
deadline = start + seconds


def worker():
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            r = post(url, iters)
        except Exception as e:
            with lock:
                errors.append(str(e))
            time.sleep(0.1)
            continue
        with lock:
            lat.append((time.monotonic() - t0) * 1000)
            gpu.append(r["gpu_ms"])


threads = [threading.Thread(target=worker) for _ in range(concurrency)]
for t in threads:
    t.start()
for t in threads:
    t.join()
elapsed = time.monotonic() - start
print(json.dumps({
    "ok": len(lat), "errors": len(errors), "first_error": errors[0] if errors else "",
    "seconds": round(elapsed, 2), "rps": round(len(lat) / elapsed, 2),
    "p50_ms": round(statistics.median(lat), 1) if lat else None,
    "gpu_ms": round(statistics.median(gpu), 2) if gpu else None,
}))
PY

# ------------------------------------------------- the co-location driver
cat >"$work/coloc.py" <<'PY'
"""faas-gpu's co-location experiment: MPS clients alone and together.

worker KIND MODEL         one client: loads MODEL (KIND model: torchvision,
                          fp16, random weights; cpu: a CPU stand-in), warms
                          up, prints "ready", then answers "run SECONDS
                          BATCH" on stdin with one JSON line (median ms per
                          batch, requests per second) until "quit".
drive OUT PHASE CLIENTS MODELS BATCHES KIND PIDS
                          the grid: for each batch, 1 model and 2 models, n
                          clients at 100/n % SM each (and one uneven split),
                          each client alone, then all together; writes
                          OUT/colocation.csv (every measurement) and
                          OUT/contention.csv (faas-gpu simulate -contention).
plan CLIENTS MODELS BATCHES
                          prints "WAVES CLIENTS PHASES": what drive starts
                          and measures, for the script's time estimate.
"""
import csv
import json
import os
import statistics
import subprocess
import sys
import time


def worker(kind, model):
    if kind == "model":
        import torch
        import torchvision

        net = getattr(torchvision.models, model)(weights=None).cuda().eval().half()
        inputs = {}

        def step(batch):
            if batch not in inputs:
                inputs[batch] = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
                for _ in range(3):  # warm-up at this batch: cuDNN picks its kernels
                    with torch.inference_mode():
                        net(inputs[batch])
            with torch.inference_mode():
                net(inputs[batch])
            torch.cuda.synchronize()
    elif kind == "cpu":  # GPU_CHECK_DRY_RUN: plumbing only
        def step(batch):
            s = 0
            for i in range(2000 * batch):
                s += i
    else:
        raise SystemExit("unknown kind " + kind)
    step(1)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            return
        seconds, batch = float(cmd[1]), int(cmd[2])
        step(batch)  # its warm-up stays out of the phase
        lat = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            step(batch)
            lat.append((time.perf_counter() - t0) * 1000)
        elapsed = time.perf_counter() - start
        print(json.dumps({"ms": statistics.median(lat), "rps": len(lat) * batch / elapsed}), flush=True)


class Client:
    def __init__(self, kind, model, sm, pids):
        env = dict(os.environ, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(sm))
        self.model, self.sm = model, sm
        self.p = subprocess.Popen([sys.executable, __file__, "worker", kind, model],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        if pids:  # the script stops every pid recorded here on exit
            open(os.path.join(pids, str(self.p.pid)), "w").close()

    def wait_ready(self):
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit("client %s sm %d did not start" % (self.model, self.sm))

    def start(self, seconds, batch):
        self.p.stdin.write("run %s %d\n" % (seconds, batch))
        self.p.stdin.flush()

    def result(self):
        return json.loads(self.p.stdout.readline())

    def stop(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
        except BrokenPipeError:
            pass
        self.p.wait(timeout=30)


def configs(clients, models, batches):
    """(label, batch, [(model, sm)]) for the whole grid."""
    out = []
    for b in batches:
        for n in clients:
            sm = max(1, 100 // n)
            out.append(("1 model", b, [(models[0], sm)] * n))
            if n >= 2 and len(models) > 1:
                out.append(("2 models", b, [(models[i % 2], sm) for i in range(n)]))
        if 2 in clients:  # the uneven split
            out.append(("1 model, uneven", b, [(models[0], 75), (models[0], 25)]))
    return out


def waves(clients, models, batches):
    """The grid in waves, one per client count: a wave's clients are started
    once and serve all its configurations at every batch (a client's SM
    share is fixed when its CUDA context is made, its batch is not), so the
    slow part, starting PyTorch and loading a model, happens once a wave
    instead of once a configuration. Returns [(need, [config])], need being
    how many clients of each (model, sm) the wave starts."""
    by_n = {}
    for c in configs(clients, models, batches):
        n = len(c[2])
        if c[0] == "1 model, uneven":
            n = 2  # shares the wave of two clients
        by_n.setdefault(n, []).append(c)
    out = []
    for n in sorted(by_n):
        need = {}
        for _, _, members in by_n[n]:
            count = {}
            for m in members:
                count[m] = count.get(m, 0) + 1
            for m, k in count.items():
                need[m] = max(need.get(m, 0), k)
        out.append((need, by_n[n]))
    return out


def phases(wave_configs):
    """How many phases a wave measures: each (model, sm, batch) alone once
    (the same client on an idle GPU, whichever configuration asks), then
    each configuration of two or more clients together."""
    alone = {(m, sm, b) for _, b, members in wave_configs for m, sm in members}
    return len(alone) + sum(1 for _, _, members in wave_configs if len(members) > 1)


def plan(clients, models, batches):
    ws = waves([int(c) for c in clients.split()], models.split(), [int(b) for b in batches.split()])
    print(len(ws), sum(sum(need.values()) for need, _ in ws), sum(phases(cs) for _, cs in ws))


def drive(out, phase, clients, models, batches, kind, pids):
    phase = float(phase)
    clients = [int(c) for c in clients.split()]
    models = models.split()
    batches = [int(b) for b in batches.split()]
    rows = []
    for need, wave_configs in waves(clients, models, batches):
        pool = {m: [Client(kind, m[0], m[1], pids) for _ in range(k)] for m, k in need.items()}
        try:
            for cs in pool.values():
                for c in cs:
                    c.wait_ready()
            alone = {}
            for label, b, members in wave_configs:
                taken = {}
                cs = []
                for m in members:
                    cs.append(pool[m][taken.get(m, 0)])
                    taken[m] = taken.get(m, 0) + 1
                for c in cs:  # each client alone, its neighbours idle
                    key = (c.model, c.sm, b)
                    if key not in alone:
                        c.start(phase, b)
                        alone[key] = c.result()
                if len(cs) > 1:
                    for c in cs:
                        c.start(phase, b)
                    together = [c.result() for c in cs]
                else:  # alone is together: nothing else runs
                    together = [alone[(cs[0].model, cs[0].sm, b)]]
                for i, c in enumerate(cs):
                    a, t = alone[(c.model, c.sm, b)], together[i]
                    others = sum(o.sm for j, o in enumerate(cs) if j != i)
                    rows.append({"config": label, "batch": b, "clients": len(cs), "client": i, "model": c.model,
                                 "sm": c.sm, "neighbours_sm": others,
                                 "alone_ms": round(a["ms"], 3), "alone_rps": round(a["rps"], 2),
                                 "together_ms": round(t["ms"], 3), "together_rps": round(t["rps"], 2)})
                print("%-16s batch %d, %d clients: %s" % (label, b, len(cs), ", ".join(
                    "%s@%d%% %.1f->%.1f ms" % (r["model"], r["sm"], r["alone_ms"], r["together_ms"])
                    for r in rows[-len(cs):])), flush=True)
        finally:
            for cs in pool.values():
                for c in cs:
                    c.stop()
    with open(os.path.join(out, "colocation.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    # The simulator's model: a client's batch runs 1 + penalty x (its
    # neighbours' SM shares, 1 = a whole GPU) times longer. Splits add up
    # to 100 % here, so no GPU time sharing is in the measurement: the
    # penalty is (together / alone - 1) / (neighbours' SM / 100), the
    # median per model.
    per = {}
    for r in rows:
        if r["neighbours_sm"] > 0 and r["alone_ms"] > 0:
            per.setdefault(r["model"], []).append(max(0.0, (r["together_ms"] / r["alone_ms"] - 1) / (r["neighbours_sm"] / 100)))
    with open(os.path.join(out, "contention.csv"), "w") as f:
        f.write("# written by hack/gpu-check.sh's co-location experiment (%s, %s s a phase)\n" % (kind, phase))
        f.write("model,penalty\n")
        every = [v for vs in per.values() for v in vs]
        if every:
            f.write("*,%.4f\n" % statistics.median(every))
        for m in sorted(per):
            f.write("%s,%.4f\n" % (m, statistics.median(per[m])))
    print(open(os.path.join(out, "contention.csv")).read(), end="")


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(*sys.argv[2:4])
    elif sys.argv[1] == "drive":
        drive(*sys.argv[2:9])
    elif sys.argv[1] == "plan":
        plan(*sys.argv[2:5])
    else:
        raise SystemExit(__doc__)
PY

# colocate runs step 7: the co-location experiment.
colocate() {
	local kind="" models=${COLOC_MODELS:-"resnet50 mobilenet_v2"}
	if [[ $models == none ]]; then
		return 0
	elif ((DRY_RUN)); then
		kind=cpu
	elif has_python 'import sys, torch, torchvision; sys.exit(0 if torch.cuda.is_available() else 1)'; then
		kind=model
	else
		log "no PyTorch with CUDA and torchvision for python3: no co-location experiment"
		return 0
	fi
	log "co-location: ${COLOC_CLIENTS:-1 2 4 8} MPS clients of $models, batch ${COLOC_BATCHES:-1 8} ($kind; MPS: $mps)"
	[[ $mps != off* ]] || ((DRY_RUN)) || echo "without MPS the SM shares are not enforced: the clients race"
	mkdir -p "$work/coloc"
	CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" run_bg python3 "$work/coloc.py" drive "$work/coloc" "$COLOC_PHASE" \
		"${COLOC_CLIENTS:-1 2 4 8}" "$models" "${COLOC_BATCHES:-1 8}" "$kind" "$work/pids" ||
		die "the co-location experiment failed"
	if [[ -n ${COLOC_OUT:-} ]]; then
		mkdir -p "$COLOC_OUT" && cp "$work/coloc/colocation.csv" "$work/coloc/contention.csv" "$COLOC_OUT/" &&
			echo "copied to $COLOC_OUT/ (faas-gpu simulate -contention $COLOC_OUT/contention.csv)"
	fi
}
has_python() { python3 -c "$1" >/dev/null 2>&1; }

# ------------------------------------------------------------- the time plan
# A lent GPU machine gives 15 minutes in all, start-up included, so the
# whole run is planned to end within 8: every step has an estimate, made
# from its settings with the costs below (seconds, on one GPU), the steps
# run in order of value, and one that would end past GPU_CHECK_BUDGET_S is
# not started. The estimates are for a GPU; a dry run on CPU is slower.
EST_READY=12    # a PyTorch replica from start to its first answer: import, CUDA context, model on the GPU
EST_PROCESS=4   # the small work function from deploy to ready (no PyTorch with nvcc work)
EST_WARMUP=2    # faas-gpu profile's --warmup, as this script passes it
EST_REMOVE=2    # a replica stopped and gone from the provider's list
EST_WAVE=10     # co-location: a wave of MPS clients started (PyTorch, CUDA context), plus 1 s a client
ceil() { awk -v x="$1" 'BEGIN { printf "%d", (x == int(x)) ? x : int(x) + 1 }'; }
words() { wc -w <<<"$1" | tr -d ' '; }
est_setup() {
	local s=30 # agent -once, the CUDA kernel's build, MPS start and probe, serve
	if [[ $ONLY == colocate ]]; then
		s=20 # the kernel's build, MPS start and probe
	elif [[ -z ${FAAS_GPU_BIN:-} ]]; then
		s=$((s + 90)) # go build
	fi
	echo "$s"
}
est_template() {
	[[ ${TEMPLATE_MODEL:-resnet50} != none ]] || { echo 0; return; }
	# One deploy and call, then per share a copy at batch 1 (latency and
	# load phases) and one at batch 8 (latency only: --concurrency 8 is
	# not above the batch).
	ceil "$(awk -v n="$(words "${TEMPLATE_SHARES:-25 50 100}")" -v d="$TEMPLATE_DURATION" -v r=$EST_READY -v w=$EST_WARMUP -v x=$EST_REMOVE \
		'BEGIN { print r + 10 + n * ((r + w + 2 * d + x) + (r + w + d + x)) }')"
}
est_colocate() {
	[[ ${COLOC_MODELS:-resnet50 mobilenet_v2} != none ]] || { echo 0; return; }
	local w c p
	read -r w c p < <(python3 "$work/coloc.py" plan "${COLOC_CLIENTS:-1 2 4 8}" "${COLOC_MODELS:-resnet50 mobilenet_v2}" "${COLOC_BATCHES:-1 8}")
	ceil "$(awk -v w="$w" -v c="$c" -v p="$p" -v d="$COLOC_PHASE" -v e=$EST_WAVE 'BEGIN { print w * e + c + p * d }')"
}
est_shares() {
	# Calibration, then per share a deploy, two warm-up calls and the load.
	ceil "$(awk -v n="$(words "$SM_SHARES")" -v d="$DURATION" -v r=$EST_PROCESS -v x=$EST_REMOVE \
		'BEGIN { print r + 10 + n * (r + 2 + d + x) }')"
}
est_profile() {
	[[ ${PROFILE_MODEL:-resnet50} != none ]] || { echo 0; return; }
	ceil "$(awk -v n="$(words "$PROFILE_SHARES")" -v d="$PROFILE_DURATION" -v r=$EST_READY -v w=$EST_WARMUP -v x=$EST_REMOVE \
		'BEGIN { print r + n * (r + w + 2 * d + x) }')"
}

# The steps in the order they run: the template's profile (the way a user's
# model becomes a profiled function), then the co-location table (it
# replaces the simulator's default contention), then the SM shares of raw
# work (MPS enforcement, without a framework), last the bare model's
# profile (the template's step measures the same model the way users run it).
case $ONLY in
template) order="template" ;;
colocate) order="colocate" ;;
*) order="template colocate shares profile" ;;
esac
declare -A step_no=([template]=8 [colocate]=7 [shares]=5 [profile]=6)
declare -A step_what=([template]="the pytorch-gpu template's profile"
	[colocate]="the co-location table (contention.csv)" [shares]="throughput at each SM share" [profile]="faas-gpu profile of PROFILE_MODEL")

print_plan() {
	local at est name
	at=$(est_setup)
	printf '\n== plan: %d s budget (GPU_CHECK_BUDGET_S), estimates for one GPU\n' "$BUDGET"
	printf '  %-8s %-44s %5s s  ends by %4s s\n' "1-4" "set-up (those of steps 1-4 this run has)" "$at" "$at"
	for name in $order; do
		est=$(est_"$name")
		if ((est == 0)); then
			printf '  %-8s %-44s   off\n' "${step_no[$name]}" "${step_what[$name]}"
			continue
		fi
		at=$((at + est))
		printf '  %-8s %-44s %5s s  ends by %4s s%s\n' "${step_no[$name]}" "${step_what[$name]}" "$est" "$at" \
			"$( ((at <= BUDGET)) || echo "  over the budget: runs only if the steps before end early")"
	done
	printf '  planned: %d s\n' "$at"
}

# run_step NAME runs one step, or skips it when its estimate would take the
# run past the budget, and records its time either way.
run_step() {
	local name=$1 est t0 line
	est=$(est_"$name")
	line="${step_no[$name]} ${step_what[$name]}"
	if ((est == 0)); then
		times+=("$line: off")
		return 0
	fi
	if ((SECONDS + est > BUDGET)); then
		log "skipped: step $line (about $est s; $((BUDGET - SECONDS)) s of the $BUDGET s budget left)"
		times+=("$line: skipped by the budget (estimate $est s, at $SECONDS s)")
		return 0
	fi
	t0=$SECONDS
	"${step_fn[$name]}"
	times+=("$line: $((SECONDS - t0)) s (estimate $est s)")
}
declare -A step_fn=([template]=template_check [colocate]=colocate [shares]=shares_check [profile]=profile_check)

print_plan
if ((PLAN_ONLY)); then
	exit 0
fi
# A step may still overrun its estimate: past the budget and a minute more
# the run stops itself, cleans up and says so, so the lent machine is not
# lost with everything measured after that.
(
	nap=""
	trap '[[ -z $nap ]] || kill "$nap" 2>/dev/null; exit 0' TERM
	sleep $((BUDGET + 60)) &
	nap=$!
	wait "$nap" || exit 0
	printf '\ngpu-check: %d s, past the budget and a minute more: stopping\n' "$SECONDS" >&2
	kill -TERM $$
) &
deadline_pid=$!

# ------------------------------------------------------------------ 1. build
if [[ $ONLY != colocate ]]; then
log "faas-gpu"
if [[ -n ${FAAS_GPU_BIN:-} ]]; then
	bin=$FAAS_GPU_BIN
	[[ -x $bin ]] || die "FAAS_GPU_BIN=$bin is not an executable"
elif command -v go >/dev/null; then
	run_bg go -C "$repo" build -o "$work/faas-gpu" . || die "go build failed (offline? build elsewhere and set FAAS_GPU_BIN)"
	bin=$work/faas-gpu
elif [[ -x $repo/bin/faas-gpu ]]; then
	bin=$repo/bin/faas-gpu
else
	die "no Go here to build faas-gpu: run 'make build' on a machine with Go and set FAAS_GPU_BIN"
fi
"$bin" version

if [[ $ONLY != template ]]; then
# ------------------------------------------------------- 2. what NVML sees
log "faas-gpu agent -once"
if command -v nvidia-smi >/dev/null; then
	nvidia-smi -L || true
fi
if ! "$bin" agent -once; then
	((DRY_RUN)) || die "the agent found no GPU through NVML"
	echo "(dry run: going on without NVML)"
fi
fi # GPU_CHECK_ONLY=template
fi # GPU_CHECK_ONLY=colocate

# --------------------------------------------------------- the GPU work kind
nvcc_bin=$(command -v nvcc || true)
if [[ -z $nvcc_bin && -x /usr/local/cuda/bin/nvcc ]]; then
	nvcc_bin=/usr/local/cuda/bin/nvcc
fi
build_nvcc() {
	[[ -n $nvcc_bin ]] || return 1
	echo "building the CUDA kernel with $nvcc_bin"
	"$nvcc_bin" -O3 -shared -Xcompiler -fPIC -o "$work/libwork.so" "$work/work.cu" >"$work/nvcc.log" 2>&1 || {
		echo "nvcc failed:" && tail -n 20 "$work/nvcc.log"
		return 1
	}
}
gpu_work=${GPU_WORK:-}
if ((DRY_RUN)); then
	gpu_work=cpu
elif [[ -z $gpu_work ]]; then
	if build_nvcc; then
		gpu_work=nvcc
	elif has_python 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
		gpu_work=torch
	elif has_python 'import cupy; cupy.cuda.runtime.getDeviceCount()'; then
		gpu_work=cupy
	else
		die "nothing can run GPU work here: install the CUDA toolkit (nvcc), or PyTorch or CuPy for python3"
	fi
elif [[ $gpu_work == nvcc ]]; then
	build_nvcc || die "GPU_WORK=nvcc but the kernel does not build"
fi
log "GPU work: $gpu_work"

# ------------------------------------------------------------------ 3. MPS
# probe runs the work once as a client would, with the MPS pipe if any.
probe() {
	CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" GPU_WORK=$gpu_work GPU_WORK_LIB="$work/libwork.so" \
		timeout 120 python3 "$work/gpu-work.py" --probe
}
mps=off
if ((DRY_RUN)); then
	:
elif command -v pgrep >/dev/null && pgrep -x nvidia-cuda-mps-control >/dev/null; then
	mps_pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}
	mps="already running (pipe $mps_pipe)"
elif command -v nvidia-cuda-mps-control >/dev/null; then
	mkdir -p "$mps_pipe" "$work/mps-log"
	if CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" CUDA_MPS_LOG_DIRECTORY="$work/mps-log" nvidia-cuda-mps-control -d; then
		mps_started=1
		mps="started (pipe $mps_pipe)"
	fi
fi
if [[ $mps != off ]] && ! probe; then
	echo "a CUDA client fails under MPS; its server log says:"
	tail -n 20 "$work/mps-log/server.log" 2>/dev/null || true
	if ((mps_started)); then
		echo quit | CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" nvidia-cuda-mps-control >/dev/null 2>&1 || true
		mps_started=0
	fi
	mps="off (it failed here)"
fi
if [[ $mps == off* ]] && ! ((DRY_RUN)); then
	probe || die "the GPU work fails even without MPS"
fi
log "MPS: $mps"
if [[ $mps == off* ]]; then
	echo "without MPS the SM share is not enforced: expect about the same req/s at every share"
fi
if [[ $ONLY == colocate ]]; then
	run_step colocate
	report_times
	exit 0
fi

# ----------------------------------------------------------------- 4. serve
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
api=http://127.0.0.1:$port
log "faas-gpu serve on :$port"
# Started in the folder that holds build/, where step 8 puts the template
# function, as a user starts it after faas-cli build --shrinkwrap.
mkdir -p "$work/stack/build"
(cd "$work/stack" && exec env -u basic_auth port="$port" "$bin" serve -state-dir "$work/state" -node-name gpu-check \
	-mps-pipe-dir "$mps_pipe") >"$work/serve.log" 2>&1 &
serve_pid=$!
for ((i = 0; i < 100; i++)); do
	curl -fsS "$api/healthz" >/dev/null 2>&1 && break
	kill -0 "$serve_pid" 2>/dev/null || die "faas-gpu serve exited"
	sleep 0.1
done
curl -fsS "$api/healthz" >/dev/null || die "faas-gpu serve does not answer"
source=$(curl -fsS "$api/system/gpus" | python3 -c 'import json, sys; g = json.load(sys.stdin); print(g["source"], "emulated" if g["emulated"] else "real", sum(len(n["gpus"]) for n in g["nodes"]), "GPUs")')
echo "inventory: $source"
if [[ $source != nvml* ]] && ! ((DRY_RUN)); then
	die "the provider does not use NVML's inventory ($source)"
fi

# deploy NAME SM [KIND MODEL] deploys the work function with that SM share,
# doing $gpu_work, or KIND's work for MODEL.
deploy() {
	local body
	body=$(python3 - "$1" "$2" "${3:-$gpu_work}" "${4:-}" <<PY
import json, sys
name, sm, kind, model = sys.argv[1:5]
env = {"mode": "http", "GPU_WORK": kind, "GPU_WORK_LIB": "$work/libwork.so",
       "GPU_CHECK_PIDS": "$work/pids", "PYTHONUNBUFFERED": "1"}
annotations = {"com.openfaas.gpu.sm": sm, "com.openfaas.gpu.memory": "8Gi"}
if model:
    env["MODEL"] = model
    annotations["com.openfaas.gpu.model"] = model
print(json.dumps({
    "service": name, "image": "local/gpu-work:check",
    "envProcess": "$(command -v python3) $work/gpu-work.py",
    "envVars": env,
    "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"},
    "annotations": annotations,
}))
PY
	)
	curl -fsS -X POST -H 'Content-Type: application/json' -d "$body" "$api/system/functions" >/dev/null ||
		die "deploy $1 failed"
	for ((i = 0; i < 1200; i++)); do
		if curl -fsS "$api/system/function/$1" 2>/dev/null |
			python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin).get("availableReplicas", 0) > 0 else 1)'; then
			return 0
		fi
		sleep 0.1
	done
	die "$1 did not become ready in 120 s"
}

undeploy() {
	curl -fsS -X DELETE -H 'Content-Type: application/json' -d "{\"functionName\":\"$1\"}" "$api/system/functions" >/dev/null || true
	for ((i = 0; i < 150; i++)); do
		curl -fs -o /dev/null "$api/system/function/$1" || return 0
		sleep 0.1
	done
}

# agent_sample prints what NVML reads while the GPU works: agent -once's
# stderr (utilisation, and each process's kind and memory; its stdout is the
# annotation, shown in step 2). A failure here is reported, not fatal: the
# throughput is this check's main result.
agent_sample() {
	local out
	if out=$("$bin" agent -once 2>&1 >/dev/null); then
		echo "NVML under load:"
		printf '%s\n' "$out" | sed 's/^/  /'
	elif ((DRY_RUN)); then
		echo "(dry run: no NVML reading under load)"
	else
		echo "agent -once failed under load: $out"
	fi
}

# --------------------------------------------- 8. the pytorch-gpu template
template_check() {
	local model=${TEMPLATE_MODEL:-resnet50} size=${TEMPLATE_SIZE:-224} threads=0 shares dir=$work/stack/build/classifier
	if [[ $model == none ]]; then
		return 0
	elif ((DRY_RUN)); then
		# On CPU: a small input and one thread keep the dry run short.
		size=${TEMPLATE_SIZE:-32} threads=1
		has_python 'import torch, torchvision' || die "the template dry run needs torch and torchvision for python3"
	elif ! has_python 'import sys, torch, torchvision; sys.exit(0 if torch.cuda.is_available() else 1)'; then
		log "no PyTorch with CUDA and torchvision for python3: no template check"
		return 0
	fi
	log "the pytorch-gpu template: $model, batch 1 and 8, at ${TEMPLATE_SHARES:-25 50 100} % SM (MPS: $mps)"
	# faas-cli new + build --shrinkwrap: the template with the example as its function.
	mkdir -p "$dir"
	cp -r "$repo/template/pytorch-gpu/." "$dir/"
	cp "$repo/examples/pytorch-classifier/handler.py" "$dir/function/"
	python3 -c 'import sys, torch; from torchvision.io import encode_png
g = torch.Generator().manual_seed(1)
sys.stdout.buffer.write(bytes(encode_png(torch.randint(0, 255, (3, 240, 320), dtype=torch.uint8, generator=g)).tolist()))' >"$work/img.png" ||
		die "cannot write the test image"
	body=$(python3 - "$model" "$size" "$threads" <<'PY'
import json, sys
model, size, threads = sys.argv[1:4]
print(json.dumps({
    "service": "classifier", "image": "local/classifier:check",
    "envVars": {"FAAS_GPU_BATCH": "8", "FAAS_GPU_BATCH_WINDOW_MS": "5", "CLASSIFIER_INPUT_SIZE": size,
                "FAAS_GPU_CPU_THREADS": threads, "PYTHONUNBUFFERED": "1"},
    "labels": {"com.openfaas.scale.min": "1", "com.openfaas.scale.max": "1"},
    "annotations": {"com.openfaas.gpu.model": model, "com.openfaas.gpu.sm": "100", "com.openfaas.gpu.memory": "4Gi"},
}))
PY
	)
	curl -fsS -X POST -H 'Content-Type: application/json' -d "$body" "$api/system/functions" >/dev/null ||
		die "deploy classifier failed"
	for ((i = 0; i < 1200; i++)); do
		curl -fsS "$api/system/function/classifier" 2>/dev/null |
			python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin).get("availableReplicas", 0) > 0 else 1)' && break
		sleep 0.1
	done
	curl -fsS --max-time 60 -H 'Content-Type: image/png' --data-binary @"$work/img.png" "$api/function/classifier" ||
		die "the classifier does not answer an image"
	echo
	curl -fsS "$api/function/classifier/_/metrics" | grep '^faas_gpu_template_model_load_seconds' || true
	# The copies get the GPU to themselves, one at a time.
	curl -fsS -X POST -H 'Content-Type: application/json' -d '{"serviceName":"classifier","replicas":0}' \
		"$api/system/scale-function/classifier" >/dev/null || die "scaling the classifier to zero failed"
	shares=$(tr -s ' ' ',' <<<"${TEMPLATE_SHARES:-25 50 100}")
	run_bg "$bin" profile --gateway "$api" --function classifier --sm "${shares%,}" --batch 1,8 \
		--duration "${TEMPLATE_DURATION}s" --warmup "${EST_WARMUP}s" --concurrency 8 --body "$work/img.png" --content-type image/png \
		--out "$work/template-$model.yaml" || die "faas-gpu profile of the template function failed"
	undeploy classifier
	log "the template function's profile (MPS: $mps)"
	cat "$work/template-$model.yaml"
	if [[ -n ${PROFILE_OUT:-} ]]; then
		mkdir -p "$PROFILE_OUT" && cp "$work/template-$model.yaml" "$PROFILE_OUT/" && echo "copied to $PROFILE_OUT/template-$model.yaml"
	fi
}
if [[ $ONLY == template ]]; then
	run_step template
	report_times
	exit 0
fi

# ------------------------------------------------------------ 5. the shares
shares_check() {
	local iters sm result
	# The work per request is fixed once, at 100 % SM, so every share does the
	# same work and only the time changes.
	log "calibrating: GPU time per request at 100 % SM to about $TARGET_MS ms"
	deploy gpu-work-cal 100
	run_bg python3 "$work/load.py" calibrate "$api/function/gpu-work-cal" 1 "$TARGET_MS" >"$work/iters" || die "calibration failed"
	iters=$(cat "$work/iters")
	undeploy gpu-work-cal
	echo "work per request: $iters units of $gpu_work"

	: >"$work/results.jsonl"
	for sm in $SM_SHARES; do
		log "SM $sm %: $DURATION s at concurrency $CONCURRENCY"
		deploy "gpu-work-$sm" "$sm"
		python3 "$work/load.py" warm "$api/function/gpu-work-$sm" "$iters" || die "gpu-work-$sm does not answer"
		python3 "$work/load.py" load "$api/function/gpu-work-$sm" "$DURATION" "$CONCURRENCY" "$iters" >"$work/result.json" &
		load_pid=$!
		run_bg sleep "$(awk -v d="$DURATION" 'BEGIN { print d / 2 }')"
		agent_sample
		# wait returns at once on a trapped signal, like run_bg.
		wait "$load_pid" || die "the load driver failed"
		load_pid=""
		result=$(cat "$work/result.json")
		echo "$result"
		printf '{"sm": %s, "result": %s}\n' "$sm" "$result" >>"$work/results.jsonl"
		undeploy "gpu-work-$sm"
	done

	log "throughput (GPU work: $gpu_work, $iters units per request; MPS: $mps)"
	python3 - "$work/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
full = next((r["result"]["rps"] for r in rows if r["sm"] == 100), None)
print("%6s %9s %9s %12s %8s %9s" % ("SM %", "req/s", "p50 ms", "GPU ms/req", "errors", "vs 100%"))
for r in sorted(rows, key=lambda r: r["sm"]):
    x = r["result"]
    rel = "%.2f" % (x["rps"] / full) if full else "-"
    print("%6d %9.2f %9s %12s %8d %9s" % (r["sm"], x["rps"], x["p50_ms"], x["gpu_ms"], x["errors"], rel))
    if x["errors"]:
        print("       first error: %s" % x["first_error"])
PY
}

# -------------------------------------------------- 6. profile a real model
profile_check() {
	local shares model_work=""
	PROFILE_MODEL=${PROFILE_MODEL:-resnet50}
	if [[ $PROFILE_MODEL == none ]]; then
		:
	elif ((DRY_RUN)); then
		model_work=cpu
	elif has_python 'import sys, torch, torchvision; sys.exit(0 if torch.cuda.is_available() else 1)'; then
		model_work=model
	else
		log "no PyTorch with CUDA and torchvision for python3: no model profiled"
	fi
	if [[ -n $model_work ]]; then
		log "faas-gpu profile: $PROFILE_MODEL ($model_work; fp16, batch 1, random weights)"
		# The profiler needs only the function's definition: at zero replicas
		# the function leaves the whole GPU to the copies it measures one at a
		# time (a machine may have a single GPU).
		deploy "$PROFILE_MODEL" 1 "$model_work" "$PROFILE_MODEL"
		curl -fsS -X POST -H 'Content-Type: application/json' -d "{\"serviceName\":\"$PROFILE_MODEL\",\"replicas\":0}" \
			"$api/system/scale-function/$PROFILE_MODEL" >/dev/null || die "scaling $PROFILE_MODEL to zero failed"
		shares=$(tr -s ' ' ',' <<<"$PROFILE_SHARES")
		run_bg "$bin" profile --gateway "$api" --function "$PROFILE_MODEL" --sm "${shares%,}" \
			--warmup "${EST_WARMUP}s" --duration "${PROFILE_DURATION}s" --concurrency "$CONCURRENCY" --out "$work/$PROFILE_MODEL.yaml" ||
			die "faas-gpu profile failed"
		undeploy "$PROFILE_MODEL"
		log "the profile (docs/profiles.md format; load it with faas-gpu serve -profiles DIR)"
		cat "$work/$PROFILE_MODEL.yaml"
		if [[ -n ${PROFILE_OUT:-} ]]; then
			mkdir -p "$PROFILE_OUT" && cp "$work/$PROFILE_MODEL.yaml" "$PROFILE_OUT/" && echo "copied to $PROFILE_OUT/$PROFILE_MODEL.yaml"
		fi
	fi
}

# ------------------------------------ steps 8, 7, 5 and 6, in order of value
for name in $order; do
	run_step "$name"
done
report_times
