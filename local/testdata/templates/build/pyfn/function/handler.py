import json
import os
import sys
import time


def read_secret(name):
    base = os.environ.get("secret_mount_path", "/var/openfaas/secrets/")
    try:
        with open(os.path.join(base, name)) as f:
            return f.read().strip()
    except OSError as e:
        return "unreadable: %s" % e


def handle(req):
    if req.args.get("sleep"):
        time.sleep(float(req.args["sleep"]))
    print("pyfn handled %s %s" % (req.method, req.path), file=sys.stderr, flush=True)
    out = {
        "lang": "python",
        "method": req.method,
        "path": req.path,
        "query": req.query_string.decode(),
        "body": req.get_data(as_text=True),
        "sm": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""),
        "secret": read_secret("api-key"),
        "pid": os.getpid(),
    }
    return 200, {"Content-Type": "application/json"}, json.dumps(out)
