"""The accuracy check of a locally served model: MNIST's test set found and read, sent through the
server's V2 inference endpoint in batches, and the answers scored (`python -m infra.local --serve`)."""

from __future__ import annotations

import gzip
import json
import struct
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from infra.local.serve import ServeFailed

TEST_IMAGES = "t10k-images-idx3-ubyte"


TEST_LABELS = "t10k-labels-idx1-ubyte"


def _idx(path: Path) -> tuple[list[int], bytes]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    dims = raw[3]
    shape = list(struct.unpack(f">{dims}I", raw[4 : 4 + 4 * dims]))
    return shape, raw[4 + 4 * dims :]


def find_test_set(*roots: Path) -> Path:
    """The directory holding the MNIST test files: the first root with them (searched below it)."""
    for root in roots:
        if not root.is_dir():
            continue
        for name in (f"{TEST_IMAGES}.gz", TEST_IMAGES):
            found = sorted(root.rglob(name))
            if found and any((found[0].parent / f"{TEST_LABELS}{s}").is_file() for s in (".gz", "")):
                return found[0].parent
    raise ServeFailed(f"no MNIST test set ({TEST_IMAGES}) under {', '.join(map(str, roots))}")


def load_test_set(directory: Path) -> tuple[bytes, bytes]:
    """Images (N*784 bytes) and labels (N bytes) of the MNIST test set."""

    def one(name: str) -> Path:
        gz = directory / f"{name}.gz"
        return gz if gz.is_file() else directory / name

    (count, rows, cols), images = _idx(one(TEST_IMAGES))
    (labels_count,), labels = _idx(one(TEST_LABELS))
    if (rows, cols) != (28, 28) or count != labels_count or len(images) != count * 784:
        raise ServeFailed(f"the MNIST test set in {directory} is not 28x28 images with one label each")
    return images, labels


@dataclass
class Evaluation:
    correct: int
    total: int
    latencies: list[float]
    seconds: float

    @property
    def accuracy(self) -> float:
        return self.correct / self.total

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def infer_body(images: bytes) -> bytes:
    count = len(images) // 784
    return json.dumps(
        {
            "inputs": [
                {"name": "images", "shape": [count, 28, 28], "datatype": "UINT8", "data": list(images)}
            ],
            "outputs": [{"name": "labels"}],
        }
    ).encode()


def infer(base_url: str, model: str, images: bytes, timeout: float = 120) -> list[int]:
    request = urllib.request.Request(
        f"{base_url}/v2/models/{model}/infer",
        data=infer_body(images),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    return [int(x) for x in answer["outputs"][0]["data"]]


def evaluate(base_url: str, model: str, images: bytes, labels: bytes, batch: int) -> Evaluation:
    """Every test image through the server, `batch` per request; correct labels and request times."""
    correct, latencies = 0, []
    started = time.perf_counter()
    for start in range(0, len(labels), batch):
        sent = time.perf_counter()
        try:
            predicted = infer(base_url, model, images[start * 784 : (start + batch) * 784])
        except (OSError, KeyError, ValueError) as error:
            raise ServeFailed(f"inference request for images {start}.. failed: {error}") from None
        latencies.append(time.perf_counter() - sent)
        correct += sum(p == t for p, t in zip(predicted, labels[start : start + batch], strict=True))
    return Evaluation(correct, len(labels), latencies, time.perf_counter() - started)
