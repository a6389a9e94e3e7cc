"""The Open Inference Protocol (KServe V2) for this model: its metadata, an inference request checked
and turned into the model's input batch, and the response.

The one input, ``images``, is ``UINT8 [N, 28, 28]`` (pixels 0-255, as in the MNIST files) or
``FP32 [N, 1, 28, 28]`` (the model's own input: pixels scaled to [0, 1], then normalised with the
MNIST mean 0.1307 and std 0.3081), its ``data`` flattened row-major (nested lists are accepted too).
The outputs are ``probabilities`` (``FP32 [N, 10]``, softmax) and ``labels`` (``INT64 [N]``); a
request's ``outputs`` selects and orders them, and its ``id`` is returned (one is made when absent).
Anything else is an HttpError: its status and one line for ``{"error": ...}``.
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any

from trainer.serve.config import ServeConfig

# Where a tensor's raw bytes travel inside the server (the binary extension): the request's input dict
# holds its bytes under this key; a response's body holds the output blobs in order, which the handler
# sends after the JSON header. Never serialised.
BINARY = "__binary__"
INPUT_NAME = "images"
PLATFORM = ""
# The Open Inference Protocol's allowed platform names (specification/protocol/inference_rest.md).
PLATFORMS = (
    "tensorrt_plan",
    "tensorflow_graphdef",
    "tensorflow_savedmodel",
    "onnx_onnxv1",
    "pytorch_torchscript",
    "mxnet_mxnet",
    "caffe2_netdef",
)
OUTPUTS = ("probabilities", "labels")
CLASSES = 10
# The accepted input layouts: datatype -> (shape after the batch dimension, array typecode).
INPUT_LAYOUTS: dict[str, tuple[tuple[int, ...], str]] = {
    "UINT8": ((28, 28), "B"),
    "FP32": ((1, 28, 28), "f"),
}


class HttpError(Exception):
    """A request the server refuses: its status and one line for ``{"error": ...}``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = " ".join(message.split())


@dataclass
class Model:
    """What the handlers share: the config, and the module once it is loaded and verified."""

    config: ServeConfig
    module: Any = None
    sha256: str = ""
    # lineage.json's text and sha256, verified against SHA256SUMS (trainer.serve.load.read_lineage).
    lineage: tuple[str, str] | None = None
    loaded: threading.Event = field(default_factory=threading.Event)
    draining: threading.Event = field(default_factory=threading.Event)

    @property
    def ready(self) -> bool:
        """Loaded and verified, and not stopping (a draining server still answers inference)."""
        return self.loaded.is_set() and not self.draining.is_set()

    def metadata(self) -> dict[str, Any]:
        return {
            "name": self.config.model_name,
            "versions": [self.config.model_version],
            # The protocol's platform names ("<project>_<format>", inference_rest.md "Platforms") list
            # pytorch_torchscript but nothing for a state_dict loaded into an eager module, which is
            # what this serves; KServe's own model server answers "" for such models (kserve 0.16.0
            # `kserve/protocol/dataplane.py`, model_metadata). The field is information only.
            "platform": PLATFORM,
            "inputs": [{"name": INPUT_NAME, "datatype": "UINT8", "shape": [-1, 28, 28]}],
            "outputs": [
                {"name": "probabilities", "datatype": "FP32", "shape": [-1, CLASSES]},
                {"name": "labels", "datatype": "INT64", "shape": [-1]},
            ],
        } | self.lineage_parameters()

    def lineage_parameters(self) -> dict[str, Any]:
        """``parameters`` with what a client needs of lineage.json (``served_lineage``: the model's,
        image's, data's and settings' digests, and the metrics) and the whole file's sha256 (the one
        SHA256SUMS lists, for whoever may read the export), once a model that has one is loaded;
        nothing otherwise. Where the data came from, the stack, the job and the pod that ran it stay in
        the export: any caller the server's NetworkPolicy admits reads the metadata.

        The protocol's metadata response names no ``parameters`` (inference_rest.md "Model Metadata
        Response JSON Object", commit 011728e) and its OpenAPI schema allows more properties
        (open_inference_rest.yaml `metadata_model_response`); a parameter's value is a string, number
        or boolean (KServe's `InferParameter`, kserve 0.16.0 `kserve/protocol/rest/v2_datamodels.py`),
        so the record travels as its JSON text.
        """
        if self.lineage is None or not self.loaded.is_set():
            return {}
        text, sha256 = self.lineage
        return {"parameters": {"lineage": served_lineage(text), "lineage_sha256": sha256}}

    def infer(self, request: Any) -> dict[str, Any]:
        """The V2 inference response for a decoded request body, or an HttpError."""
        import torch

        if not isinstance(request, dict):
            raise HttpError(400, "the request body must be a JSON object")
        parameters = request.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise HttpError(400, "'parameters' must be an object")
        wanted = requested_outputs(request.get("outputs"), bool(parameters.get("binary_data_output", False)))
        images = input_tensor(request.get("inputs"), self.config.max_batch)
        with torch.inference_mode():
            probabilities = torch.softmax(self.module(images), dim=1)
        rows = probabilities.shape[0]
        values = {"probabilities": probabilities.reshape(-1), "labels": probabilities.argmax(dim=1)}
        shapes = {"probabilities": [rows, CLASSES], "labels": [rows]}
        datatypes = {"probabilities": "FP32", "labels": "INT64"}
        outputs, blobs = [], []
        for name, binary in wanted:
            tensor: dict[str, Any] = {"name": name, "datatype": datatypes[name], "shape": shapes[name]}
            if binary:  # little-endian raw bytes, as the extension defines (torch is little-endian here)
                blob = values[name].contiguous().numpy().tobytes()
                tensor["parameters"] = {"binary_data_size": len(blob)}
                blobs.append(blob)
            else:
                tensor["data"] = values[name].tolist()
            outputs.append(tensor)
        request_id = request.get("id")
        response = {
            "model_name": self.config.model_name,
            "model_version": self.config.model_version,
            "id": request_id if isinstance(request_id, str) else str(uuid.uuid4()),
            "outputs": outputs,
        }
        return {**response, BINARY: blobs} if blobs else response


def requested_outputs(outputs: Any, binary_default: bool = False) -> list[tuple[str, bool]]:
    """The outputs to return, in order, each with whether it goes back as binary data (the request's
    `binary_data_output`, unless the output's own `parameters.binary_data` says otherwise)."""
    if outputs is None or outputs == []:
        return [(name, binary_default) for name in OUTPUTS]
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        raise HttpError(400, "'outputs' must be a list of objects with a 'name'")
    wanted = []
    for output in outputs:
        name = output.get("name")
        if name not in OUTPUTS:
            raise HttpError(400, f"unknown output {name!r}; this model has {', '.join(OUTPUTS)}")
        parameters = output.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise HttpError(400, f"output {name!r}: 'parameters' must be an object")
        wanted.append((name, bool(parameters.get("binary_data", binary_default))))
    return wanted


def attach_binary_inputs(request: Any, data: bytes) -> Any:
    """The binary extension: each input whose `parameters.binary_data_size` is set gets its slice of
    `data` (the bytes after the JSON header), in the inputs' order; the sizes must add up to `data`."""
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        return request  # input_tensor names what is wrong
    offset = 0
    for tensor in request["inputs"]:
        if not isinstance(tensor, dict):
            continue
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is None:
            continue
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or offset + size > len(data):
            raise HttpError(
                400,
                f"input {tensor.get('name')!r}: binary_data_size {size!r} does not fit the "
                f"{len(data) - offset} bytes of binary data left",
            )
        tensor[BINARY] = data[offset : offset + size]
        offset += size
    if offset != len(data):
        raise HttpError(400, f"{len(data) - offset} bytes of binary data follow the inputs that claim any")
    return request


def input_tensor(inputs: Any, max_batch: int) -> Any:
    """The one input as the model's float32 ``[N, 1, 28, 28]`` channels-last batch."""

    if not isinstance(inputs, list) or len(inputs) != 1 or not isinstance(inputs[0], dict):
        raise HttpError(400, f"'inputs' must be a list of exactly one input, {INPUT_NAME!r}")
    tensor = inputs[0]
    name, datatype, shape = tensor.get("name"), tensor.get("datatype"), tensor.get("shape")
    if name != INPUT_NAME:
        raise HttpError(400, f"unknown input {name!r}; this model takes one input, {INPUT_NAME!r}")
    if datatype not in INPUT_LAYOUTS:
        raise HttpError(400, f"input {INPUT_NAME!r}: datatype {datatype!r} not accepted; use UINT8 or FP32")
    image_shape, typecode = INPUT_LAYOUTS[datatype]
    expected = f"[N, {', '.join(map(str, image_shape))}]"
    if (
        not isinstance(shape, list)
        or len(shape) != 1 + len(image_shape)
        or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape)
        or tuple(shape[1:]) != image_shape
        or shape[0] < 1
    ):
        raise HttpError(400, f"input {INPUT_NAME!r}: shape {shape!r} is not {expected} for {datatype}")
    batch = shape[0]
    if batch > max_batch:
        raise HttpError(400, f"input {INPUT_NAME!r}: batch of {batch} is over the limit of {max_batch}")
    count = batch * math.prod(image_shape)
    raw = tensor.get(BINARY)
    if raw is not None:
        if tensor.get("data") is not None:
            raise HttpError(400, f"input {INPUT_NAME!r}: both 'data' and binary data given")
        itemsize = array(typecode).itemsize
        if len(raw) != count * itemsize:
            raise HttpError(
                400,
                f"input {INPUT_NAME!r}: {len(raw)} bytes of binary data for shape {shape} "
                f"(needs {count * itemsize}: {count} x {datatype})",
            )
        return _images(bytearray(raw), datatype, batch)
    data = tensor.get("data")
    if not isinstance(data, list):
        raise HttpError(400, f"input {INPUT_NAME!r}: 'data' must be a list of numbers")
    if data and isinstance(data[0], list):
        data = flatten(data)
    if len(data) != count:
        raise HttpError(400, f"input {INPUT_NAME!r}: {len(data)} values for shape {shape} (needs {count})")
    try:
        values = array(typecode, data)
    except (TypeError, OverflowError):
        kind = "integers 0-255" if datatype == "UINT8" else "numbers"
        raise HttpError(400, f"input {INPUT_NAME!r}: {datatype} data must be {kind}") from None
    return _images(values, datatype, batch)


def _images(values: Any, datatype: str, batch: int) -> Any:
    """The model's batch from a buffer of `datatype` values (little-endian)."""
    import torch

    from trainer.data import normalise

    if datatype == "UINT8":
        # The trainer's own normalisation, so served predictions are its evaluation's.
        images = normalise(torch.frombuffer(values, dtype=torch.uint8).reshape(batch, 1, 28, 28))
    else:
        images = torch.frombuffer(values, dtype=torch.float32).reshape(batch, 1, 28, 28)
        if not bool(torch.isfinite(images).all()):
            raise HttpError(400, f"input {INPUT_NAME!r}: FP32 data must be finite numbers")
    return images.contiguous(memory_format=torch.channels_last)


def flatten(nested: list[Any]) -> list[Any]:
    """Row-major flattening of nested lists (the protocol allows either form)."""
    items: list[Any] = nested
    while items and isinstance(items[0], list):
        if not all(isinstance(item, list) for item in items):
            raise HttpError(400, f"input {INPUT_NAME!r}: 'data' mixes lists and numbers")
        items = list(itertools.chain.from_iterable(items))
    return items


# JSON objects a valid request holds: itself, its input, outputs and their parameters (a handful). A
# body of "{}," or "[]," repeated takes some 20 times its size in memory when parsed whole, where
# numbers take at most 8 (a float and its pointer for "0.1,"): such a body is refused by a count of its
# brackets before it is parsed, and the objects are counted again as they are.
MAX_JSON_OBJECTS = 256
# Lists of the largest valid request: N x 28 rows, N images, the data, inputs and outputs lists.
LISTS_PER_IMAGE = 29
MAX_JSON_LISTS_BEYOND = 256


def parse_json(body: bytes, max_batch: int = 0) -> Any:
    if max_batch:
        most = max_batch * LISTS_PER_IMAGE + MAX_JSON_LISTS_BEYOND
        if body.count(b"[") > most or body.count(b"{") > MAX_JSON_OBJECTS:
            raise HttpError(
                400, f"request body holds more JSON lists or objects than a batch of {max_batch} needs"
            )
    objects = 0

    def counted(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal objects
        objects += 1
        if objects > MAX_JSON_OBJECTS:
            raise HttpError(400, f"request body holds more than {MAX_JSON_OBJECTS} JSON objects")
        return dict(pairs)

    try:
        return json.loads(body, object_pairs_hook=counted)
    except (ValueError, RecursionError) as error:
        raise HttpError(400, f"request body is not valid JSON ({error})") from None


# The lineage fields a client of the server gets (trainer/lineage.py describes them all).
SERVED_FIELDS = ("schema", "model", "image", "settings", "settings_sha256", "runtime", "metrics")


def served_lineage(text: str) -> str:
    """lineage.json's text as the metadata serves it: the SERVED_FIELDS, and of `data` the files'
    sha256 alone (not where they were read), as compact JSON with sorted keys."""
    record = json.loads(text)
    served = {key: record[key] for key in SERVED_FIELDS if key in record}
    files = (record.get("data") or {}).get("files") or {}
    served["data"] = {"sha256": {name: entry.get("sha256") for name, entry in sorted(files.items())}}
    return json.dumps(served, sort_keys=True, separators=(",", ":"))
