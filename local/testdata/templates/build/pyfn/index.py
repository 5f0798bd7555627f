# Serves the handler on the fixed upstream port 5000 with waitress, the way
# an of-watchdog python3-http function does. Written for faas-gpu's tests.
import sys

from flask import Flask, request
from waitress import serve

from function import handler

app = Flask(__name__)
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"]


@app.route("/", defaults={"path": ""}, methods=METHODS)
@app.route("/<path:path>", methods=METHODS)
def entry(path):
    status, headers, body = handler.handle(request)
    return body, status, headers


if __name__ == "__main__":
    print("pyfn serving on port 5000", file=sys.stderr, flush=True)
    serve(app, host="0.0.0.0", port=5000, threads=8)
