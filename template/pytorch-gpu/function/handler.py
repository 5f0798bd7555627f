"""A starting point: replace the model with yours.

load(model_name, device) builds or reads the model named by FAAS_GPU_MODEL
(or a request's X-Model header) and puts it on device. infer(batch) gets up
to FAAS_GPU_BATCH requests of one model and returns one result per request,
in order: a dict or list (JSON), str, bytes, or (status, body[, headers]).
decode(request), optional, turns one request's body into its input before
batching; raising ValueError there answers 400. docs/gpu-template.md has
the whole API.
"""
import json

import torch


def load(model_name, device):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(device).eval()


def decode(request):
    try:
        x = json.loads(request.body or b"[0, 0, 0, 0]")
        t = torch.tensor(x, dtype=torch.float32)
    except (ValueError, TypeError) as e:
        raise ValueError("want a JSON list of 4 numbers: %s" % e) from None
    if t.shape != (4,):
        raise ValueError("want a JSON list of 4 numbers, got shape %s" % list(t.shape))
    return t


def infer(batch):
    model = batch[0].model
    x = torch.stack([r.input for r in batch]).to(next(model.parameters()).device)
    y = model(x).cpu()
    return [{"model": r.model_name, "output": y[i].tolist()} for i, r in enumerate(batch)]
