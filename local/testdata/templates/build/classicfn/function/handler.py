import json
import os
import sys


def handle(body):
    base = os.environ.get("secret_mount_path", "/var/openfaas/secrets/")
    try:
        with open(os.path.join(base, "api-key")) as f:
            secret = f.read().strip()
    except OSError as e:
        secret = "unreadable: %s" % e
    print("classicfn handled %s" % os.environ.get("Http_Path", ""), file=sys.stderr, flush=True)
    return json.dumps({
        "lang": "classic",
        "method": os.environ.get("Http_Method", ""),
        "path": os.environ.get("Http_Path", ""),
        "query": os.environ.get("Http_Query", ""),
        "body": body,
        "sm": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", ""),
        "secret": secret,
        "pid": os.getpid(),
    })
