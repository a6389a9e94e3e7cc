"""Scenario 7 (serving): the endpoint answers a V2 inference request with the trained model's predictions.

Runs when the program has serving (its config has `serveKind`): the stack is the job stack with
`serveKind` from `E2E_SERVE_KIND` (`kserve` needs KServe in Standard mode in the cluster; default
`deployment`), and the endpoint is the stack output `serveUrl` (an in-cluster URL). The request is sent
from a reader pod in the job's namespace with 64 MNIST test images from the data volume, and at least
90% of the predictions must match their labels.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from infra.offline.stackconfig import project_file
from tests.e2e import judge, live
from tests.e2e.conftest import destroy
from tests.e2e.project import Backend, program_stack, up
from tests.e2e.stacks import job_config

pytestmark = pytest.mark.e2e

NAMESPACE = "ddp-mnist-e2e-serve"
CLAIMS = {"ddp-mnist-data": "/data"}
SAMPLES = 64
# Reads SAMPLES test images and labels from the data volume, posts one V2 request, prints
# {"labels": [...], "response": {...}}.
REQUEST = r"""
import gzip, json, sys, urllib.request
raw = "/data/mnist/MNIST/raw/"
n = int(sys.argv[2])
images = gzip.open(raw + "t10k-images-idx3-ubyte.gz").read()[16 : 16 + 784 * n]
labels = list(gzip.open(raw + "t10k-labels-idx1-ubyte.gz").read()[8 : 8 + n])
body = {"inputs": [{"name": "input-0", "shape": [n, 1, 28, 28], "datatype": "FP32",
         "data": [b / 255.0 for b in images]}]}
request = urllib.request.Request(sys.argv[1], json.dumps(body).encode(), {"Content-Type": "application/json"})
print(json.dumps({"labels": labels, "response": json.load(urllib.request.urlopen(request, timeout=60))}))
"""


@pytest.fixture(scope="module")
def served(backend: Backend, image: str, s3_keys: tuple[str, str], platform: dict) -> Iterator[dict]:
    if "serveKind" not in project_file().get("config", {}):
        pytest.skip("scenario 7: this program has no serving yet (no `serveKind` config key)")
    kind = os.environ.get("E2E_SERVE_KIND", "deployment")
    config = job_config(
        image, *s3_keys, namespace=NAMESPACE, storageClassName="ddp-mnist-nfs-serve", serveKind=kind
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
