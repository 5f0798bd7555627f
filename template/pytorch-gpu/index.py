"""faas-gpu's PyTorch inference server (template pytorch-gpu).

The function's handler (function/handler.py) provides
    load(model_name, device) -> model
    infer(batch) -> [result, ...]        one result per request, in order
and optionally
    decode(request) -> input             per request, before batching
This server gathers requests into batches (FAAS_GPU_BATCH, within
FAAS_GPU_BATCH_WINDOW_MS), keeps models resident with LRU eviction inside
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, and speaks faas-gpu's replica protocol
(GET and POST /_/models, X-Faas-Gpu-Models). Only the standard library and torch:
it must run on Debian's python3-torch and on a GPU machine with no network.
docs/gpu-template.md is the reference.
"""
import collections
import json
import os
import re
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

import torch

from function import handler


def log(msg, **fields):
    """One structured line on stderr: the provider keeps it in the logs."""
    fields["msg"] = msg
    print(json.dumps(fields, sort_keys=True), file=sys.stderr, flush=True)


_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_mem_limit(value):
    """Bytes of the first device in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT
    ("0=512M" or "0=1G,1=1G"), None when unset. A process sees its own
    devices from 0, and the template runs on device 0."""
    value = (value or "").strip()
    if not value:
        return None
    first = value.split(",")[0].strip()
    m = re.fullmatch(r"(?:\d+=)?(\d+)\s*([KMGTB]?)(?:i?B)?", first, re.IGNORECASE)
    if not m:
        raise ValueError("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%r: want DEV=SIZE[K|M|G], e.g. 0=512M" % value)
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def env_int(name, default, low, high):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise ValueError("%s=%r: not an integer" % (name, raw)) from None
    if not low <= v <= high:
        raise ValueError("%s=%d: want %d to %d" % (name, v, low, high))
    return v


def env_float(name, default, low, high):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        v = float(raw)
    except ValueError:
        raise ValueError("%s=%r: not a number" % (name, raw)) from None
    if not low <= v <= high:
        raise ValueError("%s=%g: want %g to %g" % (name, v, low, high))
    return v


def listen_address(env=os.environ):
    """Where the server listens: upstream_url, as of-watchdog reads it."""
    up = urlparse(env.get("upstream_url") or "http://127.0.0.1:5000")
    return up.hostname or "127.0.0.1", up.port or 5000


class Config:
    def __init__(self, env=os.environ):
        self.model = env.get("FAAS_GPU_MODEL") or "default"
        self.max_batch = env_int("FAAS_GPU_BATCH", 1, 1, 1024)
        self.window = env_float("FAAS_GPU_BATCH_WINDOW_MS", 5.0, 0.0, 10000.0) / 1000.0
        self.mem_limit = parse_mem_limit(env.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"))
        self.max_body = env_int("FAAS_GPU_MAX_BODY", 32 << 20, 1, 1 << 34)
        self.host, self.port = listen_address(env)
        threads = env_int("FAAS_GPU_CPU_THREADS", 0, 0, 1024)
        if threads:
            torch.set_num_threads(threads)
        # CUDA is used when a GPU is visible. Under MPS the CUDA driver itself
        # reads CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
        # CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: the server must only not set a
        # device other than the first visible one, nor touch CUDA before them.
        self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")


class Histogram:
    def __init__(self, name, help_, buckets):
        self.name, self.help, self.buckets = name, help_, list(buckets)
        self.counts = [0] * len(self.buckets)
        self.total, self.sum = 0, 0.0

    def observe(self, v):
        for i, b in enumerate(self.buckets):
            if v <= b:
                self.counts[i] += 1
        self.total += 1
        self.sum += v

    def text(self):
        out = ["# HELP %s %s" % (self.name, self.help), "# TYPE %s histogram" % self.name]
        for b, c in zip(self.buckets, self.counts):
            out.append('%s_bucket{le="%g"} %d' % (self.name, b, c))
        out.append('%s_bucket{le="+Inf"} %d' % (self.name, self.total))
        out.append("%s_sum %.9g" % (self.name, self.sum))
        out.append("%s_count %d" % (self.name, self.total))
        return out


class Metrics:
    """Prometheus text exposition on /_/metrics, written by hand: the
    server takes no dependency beyond torch."""

    def __init__(self):
        self.lock = threading.Lock()
        self.batch = Histogram("faas_gpu_template_batch_size", "Requests in each batch given to infer.", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
        self.wait = Histogram("faas_gpu_template_queue_wait_seconds", "Time a request waited in the queue before its batch started.",
                              [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
        self.infer = Histogram("faas_gpu_template_infer_seconds", "Time of one infer call (one batch).",
                               [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
        self.load_seconds = {}  # model -> seconds of its last load
        self.loads = collections.Counter()
        self.evictions = collections.Counter()
        self.load_failures = collections.Counter()
        self.requests = collections.Counter()  # status code -> count

    def observe(self, hist, v):
        with self.lock:
            hist.observe(v)

    def count(self, counter, key):
        with self.lock:
            counter[key] += 1

    def text(self, cache):
        def esc(s):
            return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        with self.lock:
            out = self.batch.text() + self.wait.text() + self.infer.text()
            out += ["# HELP faas_gpu_template_model_load_seconds Duration of the last load of each model.",
                    "# TYPE faas_gpu_template_model_load_seconds gauge"]
            out += ['faas_gpu_template_model_load_seconds{model="%s"} %.6f' % (esc(m), s) for m, s in sorted(self.load_seconds.items())]
            for name, help_, c in (("faas_gpu_template_model_loads_total", "Models loaded.", self.loads),
                                   ("faas_gpu_template_model_evictions_total", "Models evicted to make room.", self.evictions),
                                   ("faas_gpu_template_model_load_failures_total", "Loads that failed or did not fit.", self.load_failures)):
                out += ["# HELP %s %s" % (name, help_), "# TYPE %s counter" % name]
                out += ['%s{model="%s"} %d' % (name, esc(m), n) for m, n in sorted(c.items())]
            out += ["# HELP faas_gpu_template_requests_total Requests answered, by status code.",
                    "# TYPE faas_gpu_template_requests_total counter"]
            out += ['faas_gpu_template_requests_total{code="%d"} %d' % (code, n) for code, n in sorted(self.requests.items())]
        resident = cache.resident()
        out += ["# HELP faas_gpu_template_model_bytes Memory each resident model takes.", "# TYPE faas_gpu_template_model_bytes gauge"]
        out += ['faas_gpu_template_model_bytes{model="%s"} %d' % (esc(m), b) for m, b in resident]
        out += ["# HELP faas_gpu_template_memory_limit_bytes The replica's model memory limit (0: none).",
                "# TYPE faas_gpu_template_memory_limit_bytes gauge",
                "faas_gpu_template_memory_limit_bytes %d" % (cache.limit or 0)]
        return "\n".join(out) + "\n"


class ClientError(Exception):
    """The caller's fault: answered 400."""


class TooBig(Exception):
    """A model that cannot fit the memory limit even alone."""


def model_bytes(model):
    """Bytes of a model's parameters and buffers, when it is a module (or
    has .parameters/.buffers); 0 when unknown."""
    total = 0
    for attr in ("parameters", "buffers"):
        fn = getattr(model, attr, None)
        if callable(fn):
            total += sum(t.numel() * t.element_size() for t in fn())
    return total


class NoRoom(Exception):
    """A model that does not fit beside the resident ones: answered 507 to
    a load in idle time, which must not evict."""


class ModelCache:
    """The models resident in this process, most recently used first.
    Only the batch worker evicts; it and a load in idle time (fill) add
    models, so the order is kept under a lock, which readers (/_/models,
    the response header) take too."""

    def __init__(self, cfg, metrics, load):
        self.cfg, self.metrics, self._load = cfg, metrics, load
        self.limit = cfg.mem_limit
        self.lock = threading.Lock()
        self.filling = threading.Lock()  # one load in idle time at a time
        self.models = collections.OrderedDict()  # name -> (model, bytes), MRU first

    def resident(self):
        with self.lock:
            return [(name, b) for name, (_, b) in self.models.items()]

    def names(self):
        with self.lock:
            return list(self.models)

    def total(self):
        with self.lock:
            return sum(b for _, b in self.models.values())

    def _free(self):
        if self.cfg.device.type == "cuda":
            torch.cuda.empty_cache()

    def _evict_lru(self, reason):
        with self.lock:
            name, _ = self.models.popitem(last=True)
        self.metrics.count(self.metrics.evictions, name)
        self._free()
        log("model evicted", model=name, reason=reason)
        return name

    def get(self, name):
        """The loaded model named, loading it (and evicting the least
        recently used others to fit) if it is not resident."""
        with self.lock:
            if name in self.models:
                self.models.move_to_end(name, last=False)
                return self.models[name][0]
        while True:
            try:
                model, size, seconds = self._load_measured(name)
            except torch.cuda.OutOfMemoryError:
                # Under MPS the memory limit is the driver's: the first sign of
                # it is a failed allocation. Make room and try again.
                self._free()
                if not self.models:
                    self.metrics.count(self.metrics.load_failures, name)
                    raise TooBig("model %s does not fit the GPU memory limit %s (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s): out of memory while loading it alone"
                                 % (name, self._limit_text(), os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", ""))) from None
                self._evict_lru("out of GPU memory while loading " + name)
                continue
            except Exception:
                self.metrics.count(self.metrics.load_failures, name)
                raise
            break
        if self.limit is not None and size > self.limit:
            del model
            self._free()
            self.metrics.count(self.metrics.load_failures, name)
            raise TooBig("model %s needs %d bytes, over this replica's memory limit of %s (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s): give the function a larger com.openfaas.gpu.memory"
                         % (name, size, self._limit_text(), os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")))
        while self.limit is not None and self.models and self.total() + size > self.limit:
            self._evict_lru("%s needs %d bytes, %d of %d in use" % (name, size, self.total(), self.limit))
        with self.lock:
            self.models[name] = (model, size)
            self.models.move_to_end(name, last=False)
        self._loaded(name, size, seconds, "model loaded")
        return model

    def _load_measured(self, name):
        """Loads the model named on the device: (model, bytes it takes,
        seconds the load took). Errors are the caller's to count."""
        dev = self.cfg.device
        before = torch.cuda.memory_allocated(dev) if dev.type == "cuda" else 0
        start = time.monotonic()
        model = self._load(name, dev)
        seconds = time.monotonic() - start
        size = (torch.cuda.memory_allocated(dev) - before) if dev.type == "cuda" else 0
        return model, (size if size > 0 else model_bytes(model)), seconds

    def _loaded(self, name, size, seconds, msg):
        with self.metrics.lock:
            self.metrics.load_seconds[name] = seconds
            self.metrics.loads[name] += 1
        log(msg, model=name, device=str(self.cfg.device), bytes=size, load_seconds=round(seconds, 4), resident=self.names())

    def fill(self, name):
        """Loads the model named into the room the resident ones leave,
        least recently used, evicting nothing (POST /_/models, a load the
        provider asks in the replica's idle time): the batch worker serves
        meanwhile. NoRoom when it does not fit beside them."""
        with self.filling:
            with self.lock:
                if name in self.models:
                    return
            try:
                model, size, seconds = self._load_measured(name)
            except torch.cuda.OutOfMemoryError:
                self._free()
                self.metrics.count(self.metrics.load_failures, name)
                raise NoRoom("model %s: out of GPU memory beside %s" % (name, ",".join(self.names()))) from None
            except Exception:
                self.metrics.count(self.metrics.load_failures, name)
                raise
            with self.lock:
                fits = name in self.models or self.limit is None or sum(b for _, b in self.models.values()) + size <= self.limit
                if fits and name not in self.models:
                    self.models[name] = (model, size)  # last: least recently used
            if not fits:
                del model
                self._free()
                self.metrics.count(self.metrics.load_failures, name)
                raise NoRoom("model %s needs %d bytes; %d of %s in use by %s"
                             % (name, size, self.total(), self._limit_text(), ",".join(self.names())))
            self._loaded(name, size, seconds, "model loaded in idle time")

    def _limit_text(self):
        return "%d bytes" % self.limit if self.limit is not None else "(none)"


class Request:
    """One request as the handler sees it. input is what decode returned
    (the body when there is no decode); model is set before infer."""

    def __init__(self, method, path, headers, body, model_name):
        self.method, self.path, self.headers, self.body = method, path, headers, body
        self.model_name = model_name
        self.model = None
        self.input = body
        self.enqueued = 0.0
        self.done = threading.Event()
        self.status, self.reply_headers, self.reply = 500, {}, b""


def encode(result):
    """A handler's result as (status, headers, body bytes)."""
    status, headers = 200, {}
    if isinstance(result, tuple):
        if len(result) == 3:
            status, result, headers = result
        elif len(result) == 2:
            status, result = result
        else:
            raise TypeError("a result tuple is (status, body) or (status, body, headers), got %d items" % len(result))
    if isinstance(result, (bytes, bytearray)):
        body = bytes(result)
        headers.setdefault("Content-Type", "application/octet-stream")
    elif isinstance(result, str):
        body = result.encode()
        headers.setdefault("Content-Type", "text/plain; charset=utf-8")
    else:
        body = json.dumps(result).encode()
        headers.setdefault("Content-Type", "application/json")
    return int(status), headers, body


class Batcher:
    """One worker runs one batch at a time, as a GPU slice does. A batch
    holds requests for one model only: the first waiting request's, and the
    others of that model that arrive within the window, up to max_batch."""

    def __init__(self, cfg, metrics, cache):
        self.cfg, self.metrics, self.cache = cfg, metrics, cache
        self.cond = threading.Condition()
        self.pending = collections.deque()

    def submit(self, req):
        req.enqueued = time.monotonic()
        with self.cond:
            self.pending.append(req)
            self.cond.notify()

    def _take(self):
        with self.cond:
            while not self.pending:
                self.cond.wait()
            first = self.pending.popleft()
            batch = [first]
            deadline = time.monotonic() + self.cfg.window
            while len(batch) < self.cfg.max_batch:
                for r in list(self.pending):
                    if len(batch) == self.cfg.max_batch:
                        break
                    if r.model_name == first.model_name:
                        self.pending.remove(r)
                        batch.append(r)
                left = deadline - time.monotonic()
                if len(batch) == self.cfg.max_batch or left <= 0:
                    break
                self.cond.wait(left)
            return batch

    def run(self):
        while True:
            batch = self._take()
            start = time.monotonic()
            for r in batch:
                self.metrics.observe(self.metrics.wait, start - r.enqueued)
            self.metrics.observe(self.metrics.batch, len(batch))
            self._serve(batch)
            for r in batch:
                r.done.set()

    def _fail(self, batch, status, msg):
        for r in batch:
            r.status, r.reply_headers, r.reply = status, {"Content-Type": "text/plain; charset=utf-8"}, (msg + "\n").encode()

    def _serve(self, batch):
        name = batch[0].model_name
        try:
            model = self.cache.get(name)
        except TooBig as e:
            log("model does not fit", model=name, error=str(e))
            return self._fail(batch, 507, str(e))
        except (ValueError, KeyError) as e:
            return self._fail(batch, 400, "model %s: %s" % (name, e))
        except Exception as e:
            log("load failed", model=name, error=repr(e), traceback=traceback.format_exc())
            return self._fail(batch, 500, "loading model %s failed: %r" % (name, e))
        for r in batch:
            r.model = model
        start = time.monotonic()
        try:
            with torch.inference_mode():
                results = handler.infer(batch)
            self.metrics.observe(self.metrics.infer, time.monotonic() - start)
            results = list(results)
            if len(results) != len(batch):
                raise RuntimeError("infer returned %d results for a batch of %d" % (len(results), len(batch)))
        except Exception as e:
            # The handler's fault, not the server's: the error goes to the
            # logs and to each caller of the batch, and the worker goes on.
            log("infer raised", model=name, batch=len(batch), error=repr(e), traceback=traceback.format_exc())
            return self._fail(batch, 500, "infer failed: %r" % (e,))
        for r, res in zip(batch, results):
            try:
                if isinstance(res, Exception):
                    raise res
                r.status, r.reply_headers, r.reply = encode(res)
            except Exception as e:
                log("bad result", model=name, error=repr(e))
                self._fail([r], 500, "infer's result: %r" % (e,))


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.ready = False
        self.error = "loading model"


def make_handler(cfg, metrics, cache, batcher, state):
    decode = getattr(handler, "decode", None)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # the provider logs requests itself
            pass

        def _send(self, status, body, headers=None, models=False, count=True):
            if isinstance(body, str):
                body = body.encode()
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if self.close_connection:
                # Said, not only done: a client that reuses the connection
                # (the provider's proxy keeps them alive) would send its
                # next request into the close and read EOF (a 502).
                self.send_header("Connection", "close")
            if models:
                self.send_header("X-Faas-Gpu-Models", ",".join(cache.names()))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            if count:
                metrics.count(metrics.requests, status)

        def _chunked(self):
            # The provider's proxy streams bodies of unknown length chunked;
            # a body left unread would be parsed as the next request.
            parts, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise ClientError("bad chunk size line %r" % line[:40]) from None
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                total += size
                if total > cfg.max_body:
                    raise ClientError("body over FAAS_GPU_MAX_BODY=%d bytes" % cfg.max_body)
                parts.append(self.rfile.read(size))
                self.rfile.readline(8)

        def _body(self):
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                return self._chunked()
            n = self.headers.get("Content-Length")
            if n is None:
                return b""
            try:
                n = int(n)
            except ValueError:
                raise ClientError("Content-Length %r is not a number" % n) from None
            if n < 0 or n > cfg.max_body:
                raise ClientError("body of %d bytes: over FAAS_GPU_MAX_BODY=%d" % (n, cfg.max_body))
            return self.rfile.read(n)

        def _models(self):
            with metrics.lock:
                loads = dict(metrics.load_seconds)  # a copy: the loaders write it
            body = json.dumps({"models": [{"name": n, "bytes": b, "loadSeconds": round(loads.get(n, 0.0), 6)}
                                          for n, b in cache.resident()]})
            return self._send(200, body, {"Content-Type": "application/json"}, models=True, count=False)

        def _fill(self):
            """POST /_/models {"model": NAME}: loads it in idle time, beside
            the resident models, and answers the list once it is in; 507
            where it does not fit without evicting (docs/replica-protocol.md)."""
            try:
                ask = json.loads(self._body() or b"{}")
                name = ask.get("model", "") if isinstance(ask, dict) else ""
            except ClientError:
                self.close_connection = True  # its body may be left unread
                name = ""
            except ValueError:
                name = ""
            if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
                return self._send(400, 'want {"model": NAME}, NAME of letters, digits, \'.\', \'_\' and \'-\'\n', count=False)
            with state.lock:
                ready = state.ready
            if not ready:
                return self._send(503, "still loading its own model\n", count=False)
            try:
                cache.fill(name)
            except NoRoom as e:
                return self._send(507, str(e) + "\n", count=False)
            except (ValueError, KeyError) as e:
                return self._send(400, "model %s: %s\n" % (name, e), count=False)
            except Exception as e:
                log("load in idle time failed", model=name, error=repr(e), traceback=traceback.format_exc())
                return self._send(500, "loading model %s failed: %r\n" % (name, e), count=False)
            return self._models()

        def _route(self):
            path = urlparse(self.path).path
            if path == "/_/health":
                with state.lock:
                    ok, err = state.ready, state.error
                return self._send(200, "ok\n", count=False) if ok else self._send(503, err + "\n", count=False)
            if path == "/_/models" and self.command == "POST":
                return self._fill()
            if path == "/_/models":
                return self._models()
            if path == "/_/gpu":  # a parked process's hand-over, done or never needed
                return self._send(404, "not parked\n", count=False)
            if path == "/_/metrics":
                return self._send(200, metrics.text(cache), {"Content-Type": "text/plain; version=0.0.4"}, count=False)
            try:
                body = self._body()
            except ClientError as e:
                self.close_connection = True
                return self._send(400, str(e) + "\n")
            name = (self.headers.get("X-Model") or cfg.model).strip()
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name):
                return self._send(400, "X-Model %r: want a model name of letters, digits, '.', '_' and '-'\n" % name)
            req = Request(self.command, self.path, self.headers, body, name)
            if decode is not None:
                try:
                    req.input = decode(req)
                except ValueError as e:
                    return self._send(400, "bad input: %s\n" % e, models=True)
                except Exception as e:
                    log("decode raised", error=repr(e), traceback=traceback.format_exc())
                    return self._send(500, "decode failed: %r\n" % (e,), models=True)
            batcher.submit(req)
            req.done.wait()
            self._send(req.status, req.reply, req.reply_headers, models=True)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _route

    return Handler


def first_load(cache, cfg, state):
    """Loads the function's own model, so /_/health says ready only once a
    request can be served without a cold load. A model that cannot load
    leaves the server up and unready, the reason on /_/health and in the
    logs: exiting would only make the provider restart it in a loop."""
    try:
        cache.get(cfg.model)
    except Exception as e:
        msg = "model %s not loaded: %s" % (cfg.model, e)
        log("first model load failed; the replica stays unready", model=cfg.model, error=str(e))
        with state.lock:
            state.error = msg
        return
    with state.lock:
        state.ready, state.error = True, ""


def make_parked_handler(hand_over):
    """The server of a parked process (FAAS_GPU_PARKED=1): started ahead of
    its placement, it has none of the GPU settings and must not touch CUDA
    before they come, since the MPS ones are read when CUDA starts. GET
    /_/gpu says it waits; POST /_/gpu {"env": {...}} is the hand-over:
    hand_over(env) sets them and loads the model, and the answer is 200 once
    the process serves as the replica, else 500 with why
    (docs/replica-protocol.md, "Parked processes")."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def _send(self, status, body, ctype="text/plain"):
            body = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if urlparse(self.path).path == "/_/gpu":
                return self._send(200, '{"parked": true}\n', "application/json")
            self._send(503, "parked: waiting for GPU settings\n")

        def do_POST(self):
            if urlparse(self.path).path != "/_/gpu":
                return self._send(503, "parked: waiting for GPU settings\n")
            try:
                n = int(self.headers.get("Content-Length") or 0)
                env = json.loads(self.rfile.read(n) or b"{}").get("env")
                if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
                    raise ValueError("want {\"env\": {NAME: VALUE, ...}}")
            except (ValueError, AttributeError) as e:
                return self._send(400, "bad hand-over: %s\n" % e)
            err = hand_over(env)
            if err:
                return self._send(500, err + "\n")
            self._send(200, "serving\n")

        do_PUT = do_PATCH = do_DELETE = do_GET

    return Handler


def serve_replica(server):
    """Configures the replica from the environment, loads its model and
    makes server serve it; returns why not, or None."""
    try:
        cfg = Config()
    except ValueError as e:
        log("bad configuration", error=str(e))
        return "bad configuration: %s" % e
    metrics = Metrics()
    cache = ModelCache(cfg, metrics, handler.load)
    batcher = Batcher(cfg, metrics, cache)
    state = State()
    log("handed over", device=str(cfg.device), model=cfg.model, max_batch=cfg.max_batch, mem_limit=cfg.mem_limit)
    # Here, not in the batcher's thread: the hand-over answers once the
    # model is in, and the batcher starts after, so loads never race infer.
    first_load(cache, cfg, state)
    if not state.ready:
        return state.error
    server.RequestHandlerClass = make_handler(cfg, metrics, cache, batcher, state)
    threading.Thread(target=batcher.run, name="batcher", daemon=True).start()
    return None


def main_parked():
    host, port = listen_address()
    server = ThreadingHTTPServer((host, port), BaseHTTPRequestHandler)
    server.daemon_threads = True
    lock, served = threading.Lock(), []

    def hand_over(env):
        with lock:
            if served:
                return "already handed over"
            os.environ.update(env)
            os.environ.pop("FAAS_GPU_PARKED", None)
            err = serve_replica(server)
            if err is None:
                served.append(True)
            return err

    server.RequestHandlerClass = make_parked_handler(hand_over)
    log("parked: waiting for GPU settings", port=port, torch=torch.__version__)
    server.serve_forever()


def main():
    if os.environ.get("FAAS_GPU_PARKED") == "1":
        return main_parked()
    try:
        cfg = Config()
    except ValueError as e:
        log("bad configuration", error=str(e))
        sys.exit(2)
    metrics = Metrics()
    cache = ModelCache(cfg, metrics, handler.load)
    batcher = Batcher(cfg, metrics, cache)
    state = State()
    mps = {k: os.environ[k] for k in ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_VISIBLE_DEVICES") if k in os.environ}
    log("starting", port=cfg.port, device=str(cfg.device), model=cfg.model, max_batch=cfg.max_batch,
        window_ms=cfg.window * 1000, mem_limit=cfg.mem_limit, torch=torch.__version__, mps=mps)
    server = ThreadingHTTPServer((cfg.host, cfg.port), make_handler(cfg, metrics, cache, batcher, state))
    server.daemon_threads = True
    # The first load runs in the worker thread's place before it serves: one
    # thread touches the models, so loads never race with infer.
    def worker():
        first_load(cache, cfg, state)
        batcher.run()

    threading.Thread(target=worker, name="batcher", daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
