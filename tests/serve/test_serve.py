"""``python -m trainer.serve`` over real HTTP: the protocol, the accuracy, bad input, readiness, S3."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.serve.conftest import (
    MODEL_VERSION,
    SHARED_MNIST,
    ServeProcess,
    answers,
    free_port,
    socket_to,
    start_server,
    subprocess_env,
    wait_ready,
    wait_until,
)
from trainer.data import normalise, read_idx
from trainer.mnist_files import TEST_IMAGES, TEST_LABELS, find_file
from trainer.model import MnistCNN
from trainer.serve.protocol import PLATFORMS, served_lineage

pytestmark = pytest.mark.slow  # every test talks to a real model server process

INFER = "/v2/models/mnist/infer"


def test_images() -> tuple[torch.Tensor, torch.Tensor]:
    """The 10,000 MNIST test images (uint8 [N, 28, 28]) and labels."""
    images = read_idx(find_file(SHARED_MNIST, TEST_IMAGES) or SHARED_MNIST / TEST_IMAGES)
    labels = read_idx(find_file(SHARED_MNIST, TEST_LABELS) or SHARED_MNIST / TEST_LABELS)
    return images, labels.long()


test_images.__test__ = False  # type: ignore[attr-defined]


def uint8_request(images: torch.Tensor, **extra: Any) -> dict[str, Any]:
    return {
        "inputs": [
            {
                "name": "images",
                "datatype": "UINT8",
                "shape": list(images.shape),
                "data": images.reshape(-1).tolist(),
            }
        ],
        **extra,
    }


def in_process(output_dir: Path, images: torch.Tensor) -> torch.Tensor:
    """The model file's own forward pass in this process: softmax probabilities [N, 10]."""
    module = MnistCNN()
    module.load_state_dict(torch.load(output_dir / "model.pt", map_location="cpu", weights_only=True))
    module.eval()
    with torch.inference_mode():
        return torch.softmax(module(normalise(images.unsqueeze(1))), dim=1)


def test_health_and_metadata_follow_the_protocol(server: ServeProcess, trained: Path) -> None:
    assert server.call("GET", "/v2/health/live") == (200, {"live": True})
    assert server.call("GET", "/v2/health/ready") == (200, {"ready": True})
    assert server.call("GET", "/v2") == (
        200,
        {"name": "trainer.serve", "version": "1", "extensions": ["binary_tensor_data"]},
    )
    assert server.call("GET", "/v2/models/mnist/ready") == (200, {"name": "mnist", "ready": True})
    status, metadata = server.call("GET", "/v2/models/mnist")
    assert status == 200
    assert metadata == {
        "name": "mnist",
        "versions": [MODEL_VERSION],
        "platform": "",  # none of the protocol's platform names is this model's format (see PLATFORM)
        "inputs": [{"name": "images", "datatype": "UINT8", "shape": [-1, 28, 28]}],
        "outputs": [
            {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
            {"name": "labels", "datatype": "INT64", "shape": [-1]},
        ],
        # What a client needs of the run's lineage.json, and the whole file's sha256 as SHA256SUMS lists
        # it (a parameter's value is a scalar).
        "parameters": {
            "lineage": served_lineage((trained / "lineage.json").read_text()),
            "lineage_sha256": hashlib.sha256((trained / "lineage.json").read_bytes()).hexdigest(),
        },
    }
    served, written = (
        json.loads(metadata["parameters"]["lineage"]),
        json.loads((trained / "lineage.json").read_text()),
    )
    assert served["model"] == written["model"] and served["metrics"] == written["metrics"]
    assert served["settings_sha256"] == written["settings_sha256"] and served["image"] == written["image"]
    assert served["data"] == {"sha256": {n: f["sha256"] for n, f in written["data"]["files"].items()}}
    # Where the data was read, the stack, the job and the pod stay in the export.
    assert (
        not {"run", "stack"} & set(served)
        and str(written["data"]["source"]) not in metadata["parameters"]["lineage"]
    )
    assert metadata["platform"] in ("", *PLATFORMS)  # the protocol's names, or none
    assert server.call("GET", f"/v2/models/mnist/versions/{MODEL_VERSION}") == (200, metadata)


def test_uint8_and_fp32_inputs_give_the_model_s_outputs(server: ServeProcess, trained: Path) -> None:
    images, _ = test_images()
    batch = images[:5]
    expected = in_process(trained, batch)
    status, reply = server.call("POST", INFER, uint8_request(batch, id="req-7"))
    assert status == 200, reply
    assert (reply["model_name"], reply["model_version"], reply["id"]) == ("mnist", MODEL_VERSION, "req-7")
    probabilities, labels = reply["outputs"]
    assert (probabilities["name"], probabilities["datatype"], probabilities["shape"]) == (
        "probabilities",
        "FP32",
        [5, 10],
    )
    assert (labels["name"], labels["datatype"], labels["shape"]) == ("labels", "INT64", [5])
    assert torch.allclose(torch.tensor(probabilities["data"]).reshape(5, 10), expected, atol=1e-5)
    assert labels["data"] == expected.argmax(dim=1).tolist()

    normalised = normalise(batch.unsqueeze(1))  # FP32 [5, 1, 28, 28], nested lists
    fp32 = {
        "inputs": [
            {"name": "images", "datatype": "FP32", "shape": [5, 1, 28, 28], "data": normalised.tolist()}
        ]
    }
    path = f"/v2/models/mnist/versions/{MODEL_VERSION}/infer"
    status, reply = server.call("POST", path, {**fp32, "outputs": [{"name": "labels"}]})
    assert status == 200, reply
    assert [o["name"] for o in reply["outputs"]] == ["labels"]
    assert reply["outputs"][0]["data"] == labels["data"]
    assert reply["id"]  # one is made when the request has none


def test_accuracy_on_all_10000_test_images_equals_the_model_s_own(
    server: ServeProcess, trained: Path
) -> None:
    """Every served label is the in-process forward pass's, and the accuracy is metrics.json's."""
    images, labels = test_images()
    served: list[int] = []
    for start in range(0, len(images), 256):
        status, reply = server.call(
            "POST", INFER, uint8_request(images[start : start + 256], outputs=[{"name": "labels"}])
        )
        assert status == 200, reply
        served.extend(reply["outputs"][0]["data"])
    expected = in_process(trained, images).argmax(dim=1)
    assert served == expected.tolist()
    accuracy = (torch.tensor(served) == labels).double().mean().item()
    metrics = json.loads((trained / "metrics.json").read_text())
    assert accuracy == pytest.approx(metrics["final_test_accuracy"], abs=1e-9)


def good(server: ServeProcess) -> None:
    images, _ = test_images()
    status, reply = server.call("POST", INFER, uint8_request(images[:1]))
    assert status == 200, reply


def one_image(**override: Any) -> dict[str, Any]:
    tensor = {"name": "images", "datatype": "UINT8", "shape": [1, 28, 28], "data": [0] * 784, **override}
    return {"inputs": [tensor]}


BAD_REQUESTS = [
    ("POST", INFER, b"{not json", 400, "request body is not valid JSON"),
    ("POST", INFER, b"[1, 2]", 400, "the request body must be a JSON object"),
    ("POST", INFER, one_image(shape=[1, 28, 27]), 400, "shape [1, 28, 27] is not [N, 28, 28] for UINT8"),
    ("POST", INFER, one_image(shape=[1, 784]), 400, "shape [1, 784] is not [N, 28, 28] for UINT8"),
    ("POST", INFER, one_image(data=[0] * 783), 400, "783 values for shape [1, 28, 28] (needs 784)"),
    ("POST", INFER, one_image(datatype="FP16"), 400, "datatype 'FP16' not accepted; use UINT8 or FP32"),
    ("POST", INFER, one_image(data=[300] * 784), 400, "UINT8 data must be integers 0-255"),
    ("POST", INFER, one_image(data=[0.5] * 784), 400, "UINT8 data must be integers 0-255"),
    ("POST", INFER, one_image(data=["x"] * 784), 400, "UINT8 data must be integers 0-255"),
    (
        "POST",
        INFER,
        one_image(name="pixels"),
        400,
        "unknown input 'pixels'; this model takes one input, 'images'",
    ),
    (
        "POST",
        INFER,
        {**one_image(), "outputs": [{"name": "logits"}]},
        400,
        "unknown output 'logits'; this model has probabilities, labels",
    ),
    (
        "POST",
        INFER,
        one_image(shape=[257, 28, 28], data=[0] * 257 * 784),
        400,
        "batch of 257 is over the limit of 256",
    ),
    (
        "POST",
        "/v2/models/other/infer",
        one_image(),
        404,
        "model 'other' not found; this server serves 'mnist'",
    ),
    (
        "POST",
        "/v2/models/mnist/versions/run-0/infer",
        one_image(),
        404,
        "model 'mnist' has no version 'run-0'",
    ),
    ("GET", "/v2/models/other", None, 404, "model 'other' not found"),
    ("GET", "/v1/models/mnist", None, 404, "no such path '/v1/models/mnist'; the API is under /v2"),
    ("GET", INFER, None, 405, "GET is not allowed on /v2/models/mnist/infer; use POST"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "message"), BAD_REQUESTS)
def test_a_bad_request_gets_its_one_line_error_and_the_next_one_is_served(
    server: ServeProcess, method: str, path: str, body: Any, status: int, message: str
) -> None:
    raw = body if isinstance(body, bytes) else None
    got, reply = server.call(method, path, None if raw is not None else body, raw=raw)
    assert got == status, reply
    assert list(reply) == ["error"]
    assert message in reply["error"]
    assert "\n" not in reply["error"] and "Traceback" not in reply["error"]
    good(server)


def test_an_oversized_body_is_refused_before_it_is_read(server: ServeProcess) -> None:
    """Only the headers are sent: a 413 that comes back proves the body was never waited for."""
    request = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 30}\r\n\r\n".encode()
    status, reply = server.raw(request)
    assert (status, reply) == (
        413,
        # The default limit follows --max-batch 256: 256 x 784 FP32 values as JSON (26 bytes each) + 64 KiB.
        {"error": f"request body of {1 << 30} bytes is over the limit of {256 * 784 * 26 + 65536} bytes"},
    )
    expect = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: {1 << 30}\r\n\r\n"
    assert server.raw(expect.encode())[0] == 413  # not "100 Continue": the body is never asked for
    status, reply = server.raw(f"POST {INFER} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert (status, reply) == (411, {"error": "a Content-Length header is required (no chunked bodies)"})
    good(server)


def test_a_smaller_body_limit_is_honoured(trained: Path) -> None:
    small = start_server(str(trained), "--max-body-bytes=1000", "--max-batch=2")
    try:
        wait_ready(small)
        status, reply = small.call("POST", INFER, one_image())
        assert status == 413 and "over the limit of 1000 bytes" in reply["error"]
    finally:
        code, _, err = small.stop()
    assert code == 0, err


def copy_run(trained: Path, target: Path) -> Path:
    target.mkdir()
    for name in ("model.pt", "metrics.json", "lineage.json", "SHA256SUMS"):
        shutil.copy(trained / name, target / name)
    return target


def test_the_model_is_not_ready_until_it_is_loaded_and_verified(trained: Path, tmp_path: Path) -> None:
    """model.pt is a FIFO: the load blocks until the test writes it, a model that is slow to arrive."""
    run = copy_run(trained, tmp_path / "slow")
    (run / "model.pt").unlink()
    os.mkfifo(run / "model.pt")
    slow = start_server(str(run))
    try:
        assert slow.call("GET", "/v2/health/live") == (200, {"live": True})
        assert slow.call("GET", "/v2/health/ready") == (503, {"ready": False})
        assert slow.call("GET", "/v2/models/mnist/ready") == (503, {"name": "mnist", "ready": False})
        status, reply = slow.call("POST", INFER, one_image())
        assert status == 503 and reply["error"].startswith("model 'mnist' is not ready yet")
        assert slow.call("GET", "/v2/models/mnist")[0] == 200
        writer = threading.Thread(
            target=(run / "model.pt").write_bytes, args=((trained / "model.pt").read_bytes(),)
        )
        writer.start()
        wait_ready(slow)
        writer.join()
        good(slow)
    finally:
        code, out, err = slow.stop()
    assert code == 0, err
    sha = hashlib.sha256((trained / "model.pt").read_bytes()).hexdigest()
    assert out.splitlines() == [
        f"trainer.serve: serving model mnist version {MODEL_VERSION} from {run} "
        f"(model.pt sha256 {sha} and lineage.json verified against SHA256SUMS) on http://127.0.0.1:{slow.port}"
    ]


def never_ready(server: ServeProcess) -> tuple[int, str]:
    """Polls readiness until the process ends; it must never have answered 200."""
    answers: list[int] = []

    def ended() -> bool:
        with contextlib.suppress(OSError):
            answers.append(server.call("GET", "/v2/health/ready")[0])
        return server.process.poll() is not None

    wait_until(ended, "the process to end", server.process)
    code, out, err = server.stop()
    assert 200 not in answers
    assert out == ""
    return code, err


def test_a_tampered_sha256sums_never_becomes_ready(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path / "tampered")
    (run / "SHA256SUMS").write_text(f"{'0' * 64}  model.pt\n")
    code, err = never_ready(start_server(str(run)))
    actual = hashlib.sha256((trained / "model.pt").read_bytes()).hexdigest()
    assert code == 3
    assert err.splitlines() == [
        f"trainer.serve: data: {run}/model.pt: sha256 {actual} does not match SHA256SUMS ({'0' * 64}); "
        "the model is corrupt or was replaced, export it again"
    ]


@pytest.mark.parametrize(
    ("change", "line"),
    [
        ("no-sums", "SHA256SUMS not found; serve a finished run's output directory"),
        ("unlisted", "SHA256SUMS does not list model.pt"),
        ("not-a-model", "model.pt is not this model's state_dict"),
    ],
)
def test_a_model_that_cannot_be_verified_or_loaded_exits_3(
    trained: Path, tmp_path: Path, change: str, line: str
) -> None:
    run = copy_run(trained, tmp_path / change)
    if change == "no-sums":
        (run / "SHA256SUMS").unlink()
    elif change == "unlisted":
        (run / "SHA256SUMS").write_text(f"{'0' * 64}  metrics.json\n")
    else:
        junk = b"not a torch file"
        (run / "model.pt").write_bytes(junk)
        (run / "SHA256SUMS").write_text(f"{hashlib.sha256(junk).hexdigest()}  model.pt\n")
    code, err = never_ready(start_server(str(run)))
    assert code == 3
    assert len(err.splitlines()) == 1 and line in err and err.startswith("trainer.serve: data: ")


def test_bad_flags_and_a_taken_port_are_one_line_each(trained: Path) -> None:
    import subprocess
    import sys

    from tests.serve.conftest import REPO_ROOT

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "trainer.serve", *args],
            cwd=REPO_ROOT,
            env=subprocess_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    result = run(f"--model-uri={trained}", "--max-batch=0")
    assert (result.returncode, result.stderr) == (
        2,
        "trainer.serve: usage: argument --max-batch: 0 is not a positive integer "
        "(see 'python -m trainer.serve --help')\n",
    )
    assert run("--port=8080").returncode == 2
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run(f"--model-uri={trained}", "--host=127.0.0.1", f"--port={port}")
    assert result.returncode == 8
    assert result.stderr == (
        f"trainer.serve: listen: cannot listen on 127.0.0.1:{port} (Address already in use)\n"
    )


def s3_client(s3: Any) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        aws_access_key_id=s3.key_id,
        aws_secret_access_key=s3.secret,
        region_name="us-east-1",
    )


def upload(s3: Any, trained: Path, bucket: str, prefix: str) -> str:
    client = s3_client(s3)
    client.create_bucket(Bucket=bucket)
    for name in ("model.pt", "metrics.json", "lineage.json", "SHA256SUMS"):
        client.put_object(Bucket=bucket, Key=f"{prefix}{name}", Body=(trained / name).read_bytes())
    return f"s3://{bucket}/{prefix}"


def serves_well(uri: str, *flags: str, env: dict[str, str]) -> tuple[str, str]:
    """Start the server on `uri`, check it gets ready and answers right, stop it (exit 0); its output."""
    served = start_server(uri, *flags, env=env)
    try:
        wait_ready(served)
        good(served)
    finally:
        code, out, err = served.stop()
    assert code == 0, err
    return out, err


def test_the_model_is_served_from_s3(s3_server: Any, trained: Path) -> None:
    uri = upload(s3_server, trained, "models-a", "team/models/job-a/")
    out, err = serves_well(uri, env=s3_server.env())
    assert f"from {uri} (model.pt sha256" in out
    assert s3_server.secret not in out + err


def test_wrong_s3_credentials_exit_4_with_one_line(s3_server: Any, trained: Path) -> None:
    uri = upload(s3_server, trained, "models-b", "team/models/job-b/")
    env = s3_server.env(AWS_SECRET_ACCESS_KEY="not-the-secret")
    code, err = never_ready(start_server(uri, env=env))
    assert code == 4
    assert err == (
        f"trainer.serve: s3: {s3_server.endpoint} rejected the credentials for {uri}SHA256SUMS "
        "(SignatureDoesNotMatch); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY\n"
    )
    assert "not-the-secret" not in err


def test_the_trainer_writes_a_sha256sums_of_its_model_and_lineage(trained: Path) -> None:
    digest = hashlib.sha256((trained / "model.pt").read_bytes()).hexdigest()
    lineage = hashlib.sha256((trained / "lineage.json").read_bytes()).hexdigest()
    assert (trained / "SHA256SUMS").read_text() == f"{lineage}  lineage.json\n{digest}  model.pt\n"


def test_free_port_helper_is_usable() -> None:
    assert 0 < free_port() < 65536


def test_a_malformed_request_line_gets_a_json_error(server: ServeProcess) -> None:
    status, reply = server.raw(b"NONSENSE\r\n\r\n")
    assert status == 400 and list(reply) == ["error"]
    good(server)


def test_the_server_imports_nothing_the_image_lacks() -> None:
    """trainer/serve/ imports the standard library, torch and the trainer package only (boto3
    comes through trainer.s3 for s3:// models): the image installs nothing more for serving."""
    import ast
    import sys

    from tests.serve.conftest import REPO_ROOT

    modules = sorted((REPO_ROOT / "trainer" / "serve").glob("*.py"))
    assert {m.name for m in modules} >= {"__main__.py", "cli.py", "load.py", "protocol.py", "server.py"}
    nodes = [node for module in modules for node in ast.walk(ast.parse(module.read_text()))]
    imported = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in nodes if isinstance(node, ast.ImportFrom) and node.module}
    imported = {name.split(".")[0] for name in imported}
    assert imported - set(sys.stdlib_module_names) == {"trainer", "torch"}


def serving_section() -> str:
    from tests.docs.pages import page, section

    return section(page("docs/how-to/serving.md"), "The model server")


def test_the_serving_page_names_every_flag_of_the_server() -> None:
    """Every flag of ``--help`` is named (its exit codes: docs/reference/exit-codes.md, generated)."""
    import re

    from trainer.serve import cli as serve

    section = serving_section()
    flags = {f for action in serve.build_parser()._actions for f in action.option_strings if f != "-h"}
    assert "--max-body-bytes" in flags and "--help" in flags
    flags.discard("--help")
    assert flags <= set(re.findall(r"`(--[a-z-]+)`", section))


def test_the_file_names_are_the_trainer_s() -> None:
    from trainer import metrics, mnist_files
    from trainer.serve import config as serve

    assert (serve.MODEL_FILE, serve.LINEAGE_FILE, serve.SUMS_FILE) == (
        metrics.MODEL_FILE,
        metrics.LINEAGE_FILE,
        mnist_files.SUMS_FILE,
    )


def test_concurrent_clients_each_get_their_own_answers(server: ServeProcess) -> None:
    images, _ = test_images()
    expected: dict[int, list[int]] = {}
    got: dict[int, list[int]] = {}

    def client(index: int) -> None:
        own = ServeProcess(server.process, server.port)
        batch = images[index * 7 : index * 7 + 7]
        status, reply = own.call("POST", INFER, uint8_request(batch, id=f"c{index}"))
        assert status == 200 and reply["id"] == f"c{index}"
        got[index] = reply["outputs"][1]["data"]
        if own.connection is not None:
            own.connection.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(8):
        status, reply = server.call("POST", INFER, uint8_request(images[index * 7 : index * 7 + 7]))
        expected[index] = reply["outputs"][1]["data"]
    assert got == expected


def test_a_body_that_never_comes_gets_408_and_the_server_goes_on(trained: Path) -> None:
    slow = start_server(str(trained), "--request-timeout=1")
    try:
        wait_ready(slow)
        status, reply = slow.raw(
            f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{{".encode()
        )
        assert (status, reply) == (408, {"error": "request body not received within 1 s"})
        good(slow)
    finally:
        code, _, err = slow.stop()
    assert code == 0 and err == "", err


def test_a_request_received_before_sigterm_is_answered_before_the_server_exits(trained: Path) -> None:
    """A rollout or a deletion sends SIGTERM while requests are in flight: once its drain period is
    over (none here) the server takes no new connection but answers the request it is reading (its
    body still arriving) and only then exits 0."""
    images, _ = test_images()
    body = json.dumps(uint8_request(images[:2])).encode()
    server = start_server(str(trained), "--drain-seconds=0")
    try:
        wait_ready(server)
        with socket_to(server.port) as sock:
            head = f"POST {INFER} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            sock.sendall(head.encode() + body[:100])
            time.sleep(0.5)  # the server is reading the body now
            server.process.send_signal(signal.SIGTERM)
            time.sleep(1.5)  # well past the stop's first check (every 0.5 s)
            assert server.process.poll() is None, "the server exited with a request unanswered"
            assert not answers(server), "a new connection was accepted after SIGTERM"
            sock.sendall(body[100:])
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
                if b"\r\n\r\n" in reply and len(reply.partition(b"\r\n\r\n")[2]) >= int(
                    reply.split(b"Content-Length: ", 1)[1].split(b"\r\n", 1)[0]
                ):
                    break
        status = int(reply.split()[1])
        answer = json.loads(reply.partition(b"\r\n\r\n")[2])
        labels = next(output for output in answer["outputs"] if output["name"] == "labels")
        assert status == 200 and len(labels["data"]) == 2, answer
    finally:
        code, _, err = server.stop()
    assert code == 0 and err == "", err


def test_after_sigterm_it_reports_not_ready_but_answers_new_connections_until_the_drain_ends(
    trained: Path,
) -> None:
    """The pod's endpoint leaves every kube-proxy only some time after SIGTERM: meanwhile readiness is
    503 (no new traffic is routed to it) yet new connections and inference are still answered; after
    `--drain-seconds` it stops accepting and exits 0."""
    images, _ = test_images()
    server = start_server(str(trained), "--drain-seconds=3")
    try:
        wait_ready(server)
        server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        wait_until(lambda: server.call("GET", "/v2/health/ready")[0] == 503, "not ready", server.process, 2)
        for _ in range(3):
            server.connection = None  # a new connection each time: accepted while draining
            status, reply = server.call("POST", INFER, uint8_request(images[:2]))
            assert status == 200 and len(reply["outputs"][1]["data"]) == 2, reply
            assert server.call("GET", "/v2/models/mnist/ready") == (503, {"name": "mnist", "ready": False})
            time.sleep(0.3)
        assert server.process.wait(30) == 0
        assert time.monotonic() - signalled >= 3
    finally:
        code, _, err = server.stop()
    assert code == 0 and err == "", err


def test_an_s3_prefix_without_an_export_exits_3_and_an_unreachable_endpoint_205(
    s3_server: Any, trained: Path
) -> None:
    upload(s3_server, trained, "models-c", "team/models/other/")
    uri = "s3://models-c/team/models/never-exported/"
    code, err = never_ready(start_server(uri, env=s3_server.env()))
    assert (code, err) == (
        3,
        f"trainer.serve: data: {uri}SHA256SUMS not found; export the run with --export-to {uri}\n",
    )
    closed = f"http://127.0.0.1:{free_port()}"
    code, err = never_ready(start_server(uri, env=s3_server.env(AWS_ENDPOINT_URL=closed)))
    assert code == 205
    assert err.startswith(f"trainer.serve: s3: cannot reach the S3 endpoint {closed} for {uri}SHA256SUMS")
    assert len(err.splitlines()) == 1


def test_the_e2e_tiers_request_script_gets_the_models_predictions(
    server: Any, trained: Path, tmp_path: Path
) -> None:
    """The request the e2e tier sends from a pod (scenario 7) works against the real server: the same
    script, run here on a data root laid out like the data volume, POSTs to `<serveUrl>/infer`."""
    from tests.e2e.judge import v2_predictions
    from tests.e2e.test_serving import REQUEST

    raw = tmp_path / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (raw / name).symlink_to(SHARED_MNIST / name)
    url = f"http://127.0.0.1:{server.port}/v2/models/mnist"  # the form of the `serveUrl` output
    result = subprocess.run(
        [sys.executable, "-c", REQUEST, url, "64", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer = json.loads(result.stdout)
    predictions = v2_predictions(answer["response"])
    assert len(predictions) == 64
    assert sum(p == label for p, label in zip(predictions, answer["labels"], strict=True)) >= 0.5 * 64


def test_a_model_from_s3_must_be_the_one_the_job_wrote(s3_server: Any, trained: Path, tmp_path: Path) -> None:
    """`--sums-from` (the job's SHA256SUMS on its checkpoint volume): the export as the job wrote it
    serves; one replaced together with the SHA256SUMS beside it, as a holder of the S3 key could, never
    becomes ready."""
    uri = upload(s3_server, trained, "models-d", "team/models/job-d/")
    job_sums = str(trained / "SHA256SUMS")
    out, _ = serves_well(uri, f"--sums-from={job_sums}", env=s3_server.env())
    assert f"verified against SHA256SUMS and the job's {job_sums})" in out
    # The export replaced: another model (the same weights, saved again with one changed) and its own sums.
    import torch

    state = torch.load(trained / "model.pt", weights_only=True)
    first = next(iter(state))
    state[first] = state[first] + 1
    replaced = tmp_path / "model.pt"
    torch.save(state, replaced)
    data = replaced.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    client = s3_client(s3_server)
    client.put_object(Bucket="models-d", Key="team/models/job-d/model.pt", Body=data)
    client.put_object(
        Bucket="models-d", Key="team/models/job-d/SHA256SUMS", Body=f"{digest}  model.pt\n".encode()
    )
    code, err = never_ready(start_server(uri, f"--sums-from={job_sums}", env=s3_server.env()))
    expected = hashlib.sha256((trained / "model.pt").read_bytes()).hexdigest()
    assert code == 3
    assert err.splitlines() == [
        f"trainer.serve: data: {uri.rstrip('/')}/model.pt: sha256 {digest} is not the model the training job "
        f"wrote ({expected} in {job_sums}); the export was replaced, export the run again"
    ]
