"""The model server judged by the Open Inference Protocol clients people use, unmodified and with their
defaults: Triton's HTTP client (`tritonclient.http`, binary tensor data by default, and JSON) and
KServe's REST client (`kserve.InferenceRESTClient`, binary by default), on real MNIST test images:
every label is the model's own, so the accuracy is the run's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.http as triton
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig

from tests.serve.conftest import ServeProcess
from tests.serve.test_serve import in_process, test_images
from trainer.serve.protocol import served_lineage

pytestmark = pytest.mark.slow  # a real model server process

MODEL = "mnist"
COUNT = 2048  # eight full batches of 256


def _expected(trained: Path, images: torch.Tensor) -> list[int]:
    return in_process(trained, images).argmax(dim=1).tolist()


def _accuracy(served: list[int], labels: torch.Tensor) -> float:
    return float((torch.tensor(served) == labels).double().mean().item())


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_tritonclient_gets_the_models_labels(server: ServeProcess, trained: Path, binary: bool) -> None:
    images, labels = test_images()
    images, labels = images[:COUNT], labels[:COUNT]
    client = triton.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(MODEL)
    metadata = client.get_model_metadata(MODEL)
    assert [i["name"] for i in metadata["inputs"]] == ["images"]
    served: list[int] = []
    for start in range(0, COUNT, 256):
        batch = images[start : start + 256].numpy()
        tensor = triton.InferInput("images", list(batch.shape), "UINT8")
        tensor.set_data_from_numpy(batch, binary_data=binary)
        outputs = [
            triton.InferRequestedOutput("labels", binary_data=binary),
            triton.InferRequestedOutput("probabilities", binary_data=binary),
        ]
        result = client.infer(MODEL, [tensor], outputs=outputs)
        probabilities = result.as_numpy("probabilities")
        assert probabilities.shape == (len(batch), 10) and probabilities.dtype == np.float32
        assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
        served.extend(result.as_numpy("labels").tolist())
    client.close()
    assert served == _expected(trained, images)
    assert _accuracy(served, labels) > 0.9


def test_tritonclient_with_every_default_and_fp32_input(server: ServeProcess, trained: Path) -> None:
    """No outputs named: the client asks for every output in binary; the model's own FP32 input."""
    images, _ = test_images()
    batch = images[:64]
    normalised = ((batch.float() / 255.0 - 0.1307) / 0.3081).unsqueeze(1).numpy().astype(np.float32)
    client = triton.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    tensor = triton.InferInput("images", list(normalised.shape), "FP32")
    tensor.set_data_from_numpy(normalised)
    result = client.infer(MODEL, [tensor])
    client.close()
    assert result.as_numpy("labels").tolist() == _expected(trained, batch)
    assert result.get_response()["model_name"] == MODEL


def test_kserves_rest_client_gets_the_models_labels(server: ServeProcess, trained: Path) -> None:
    images, labels = test_images()
    images, labels = images[:COUNT], labels[:COUNT]

    async def infer_all() -> list[int]:
        client = InferenceRESTClient(config=RESTConfig(protocol="v2"))
        served: list[int] = []
        try:
            for start in range(0, COUNT, 256):
                batch = images[start : start + 256].numpy()
                tensor = InferInput(name="images", shape=list(batch.shape), datatype="UINT8")
                tensor.set_data_from_numpy(batch)  # binary_data=True by default
                request = InferRequest(model_name=MODEL, infer_inputs=[tensor], request_id=f"r{start}")
                response = await client.infer(f"http://127.0.0.1:{server.port}", request, model_name=MODEL)
                assert response.id == f"r{start}"
                outputs = {o.name: o for o in response.outputs}
                served.extend(outputs["labels"].as_numpy().tolist())
        finally:
            await client.close()
        return served

    served = asyncio.run(infer_all())
    assert served == _expected(trained, images)
    assert _accuracy(served, labels) > 0.9


def test_binary_requests_that_do_not_add_up_get_one_line_400s(server: ServeProcess) -> None:
    header = {
        "inputs": [
            {
                "name": "images",
                "datatype": "UINT8",
                "shape": [1, 28, 28],
                "parameters": {"binary_data_size": 784},
            }
        ]
    }
    raw = json.dumps(header).encode()
    cases = [
        (raw + bytes(700), len(raw), "binary_data_size 784 does not fit the 700 bytes of binary data left"),
        (raw + bytes(800), len(raw), "16 bytes of binary data follow the inputs that claim any"),
        (raw + bytes(784), len(raw) + 10_000, "is not a length within the"),
        (raw[:-1] + bytes(785), len(raw), "request body is not valid JSON"),
    ]
    for body, length, message in cases:
        status, reply = server.call_with_headers(
            "POST", f"/v2/models/{MODEL}/infer", body, {"Inference-Header-Content-Length": str(length)}
        )
        assert status == 400 and message in reply["error"], (message, reply)


def test_both_clients_parse_the_metadata_with_its_lineage_parameter(
    server: ServeProcess, trained: Path
) -> None:
    """The metadata's `parameters` (the run's lineage) is read by tritonclient's get_model_metadata and
    fits KServe's own metadata and parameter models (kserve 0.16.0 `protocol/rest/v2_datamodels.py`:
    its REST client has no metadata call, so its server's response model stands in for it)."""
    from kserve.protocol.rest.v2_datamodels import ModelMetadataResponse, Parameters
    from pydantic import TypeAdapter

    lineage = served_lineage((trained / "lineage.json").read_text())
    client = triton.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    metadata = client.get_model_metadata(MODEL)
    client.close()
    assert json.loads(metadata["parameters"]["lineage"]) == json.loads(lineage)
    parsed = ModelMetadataResponse.model_validate(metadata)
    assert [o.name for o in parsed.outputs] == ["probabilities", "labels"]
    parameters = TypeAdapter(Parameters).validate_python(metadata["parameters"])
    assert parameters["lineage"] == lineage
