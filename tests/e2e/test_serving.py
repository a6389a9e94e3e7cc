"""Scenario 7 (serving): the endpoint answers a V2 inference request with the trained model's predictions.

The stack is the job stack with `serveKind` from `E2E_SERVE_KIND` (default `deployment`; `kserve`
needs KServe in Standard mode in the cluster), and the endpoint is the stack output `serveUrl` (an
in-cluster URL). The request is sent from a reader pod in the job's namespace with 64 MNIST test
images from the data volume, and at least 90% of the predictions must match their labels.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.e2e import judge, live
from tests.e2e.conftest import destroy
from tests.e2e.project import Backend, program_stack, up
from tests.e2e.stacks import job_config

pytestmark = pytest.mark.e2e

NAMESPACE = "ddp-mnist-e2e-serve"
CLAIMS = {"ddp-mnist-data": "/data"}
SAMPLES = 64
# Reads N test images and labels from the data volume (ROOT, default /data), posts one V2 inference
# request to URL/infer (URL: the stack output `serveUrl`, the model's path) with the images as the
# server's `images` input (UINT8 [N,28,28], raw pixels), prints {"labels": [...], "response": {...}}.
# `tests/serve` runs this very script against a local server, so a mismatch with the server's
# protocol fails there, not only on a cluster.
REQUEST = r"""
import gzip, json, sys, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
raw = (sys.argv[3] if len(sys.argv) > 3 else "/data") + "/mnist/MNIST/raw/"
images = gzip.open(raw + "t10k-images-idx3-ubyte.gz").read()[16 : 16 + 784 * n]
labels = list(gzip.open(raw + "t10k-labels-idx1-ubyte.gz").read()[8 : 8 + n])
body = {"inputs": [{"name": "images", "shape": [n, 28, 28], "datatype": "UINT8", "data": list(images)}]}
headers = {"Content-Type": "application/json"}
request = urllib.request.Request(url + "/infer", json.dumps(body).encode(), headers)
print(json.dumps({"labels": labels, "response": json.load(urllib.request.urlopen(request, timeout=60))}))
"""


@pytest.fixture(scope="module")
def served(backend: Backend, image: str, s3_keys: tuple[str, str], platform: dict) -> Iterator[dict]:
    kind = os.environ.get("E2E_SERVE_KIND", "deployment")
    extra = {"kservePresent": "true"} if kind == "kserve" else {}
    config = job_config(
        image, *s3_keys, namespace=NAMESPACE, storageClassName="ddp-mnist-nfs-serve", serveKind=kind, **extra
    )
    stack = program_stack(backend, "e2e-serve", config)
    outputs = up(stack)
    yield {"outputs": outputs, "image": image}
    destroy(stack, NAMESPACE)


def test_7_the_endpoint_answers_a_v2_request_with_the_models_predictions(served: dict) -> None:
    url = served["outputs"]["serveUrl"]
    live.kubectl("apply", "-f", "-", stdin=json.dumps(live.reader_pod(NAMESPACE, served["image"], CLAIMS)))
    try:
        live.wait_for("pod", live.READER, NAMESPACE, "Ready", 300)
        answer = json.loads(
            live.kubectl(
                "exec", "-n", NAMESPACE, live.READER, "--", "python", "-c", REQUEST, url, str(SAMPLES)
            )
        )
    finally:
        live.kubectl("delete", "pod", live.READER, "-n", NAMESPACE, "--ignore-not-found")
    predictions = judge.v2_predictions(answer["response"])
    hits = sum(p == label for p, label in zip(predictions, answer["labels"], strict=True))
    assert hits >= 0.9 * SAMPLES, (hits, SAMPLES)
