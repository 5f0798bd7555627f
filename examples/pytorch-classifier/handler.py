"""An image classifier for faas-gpu's pytorch-gpu template.

POST an image (JPEG or PNG) and get JSON: the top classes with their
probabilities. The model is any torchvision classification model by name
(resnet18, mobilenet_v3_small, ...): FAAS_GPU_MODEL, or X-Model per request.
Weights are random unless $FAAS_GPU_MODEL_DIR/<model>.pt holds a
state_dict: nothing is downloaded, so it runs on machines with no network.
CLASSIFIER_INPUT_SIZE (default 224) is the side images are resized to.
"""
import os

import torch
import torchvision
from torchvision.io import ImageReadMode, decode_image
from torchvision.transforms.functional import resize

SIZE = int(os.environ.get("CLASSIFIER_INPUT_SIZE") or 224)
TOP = 3
_MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
_STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)


def load(model_name, device):
    if model_name not in torchvision.models.list_models(module=torchvision.models):
        # ValueError: the template answers 400, the caller named a wrong model.
        raise ValueError("not a torchvision classification model")
    # Seeded so that every replica of a model answers alike.
    torch.manual_seed(0)
    model = torchvision.models.get_model(model_name, weights=None)
    store = os.environ.get("FAAS_GPU_MODEL_DIR")
    path = os.path.join(store, model_name + ".pt") if store else ""
    if path and os.path.exists(path):
        model.load_state_dict(torch.load(path, map_location="cpu"))
    return model.to(device).eval()


def decode(request):
    if not request.body:
        raise ValueError("empty body: POST a JPEG or PNG image")
    try:
        img = decode_image(torch.frombuffer(bytearray(request.body), dtype=torch.uint8), mode=ImageReadMode.RGB)
    except RuntimeError as e:
        raise ValueError("the body is not a JPEG or PNG image (%s)" % str(e).splitlines()[0]) from None
    img = resize(img, [SIZE, SIZE]).float().div_(255)
    return (img - _MEAN) / _STD


def infer(batch):
    model = batch[0].model
    device = next(model.parameters()).device
    x = torch.stack([r.input for r in batch]).to(device)
    probs = torch.softmax(model(x), dim=1).cpu()
    p, idx = probs.topk(TOP, dim=1)
    return [{"model": r.model_name, "batch": len(batch),
             "top": [{"class": int(c), "p": round(float(q), 6)} for q, c in zip(p[i], idx[i])]}
            for i, r in enumerate(batch)]
