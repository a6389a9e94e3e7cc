"""Time ``python -m trainer.serve`` over HTTP beside the model's in-process forward pass (the floor).

    python bench/bench_serve.py --data ../shared/data/mnist [--model-dir DIR] [--threads 1] [--json out.json]

Without ``--model-dir`` it first trains a small model (``python -m trainer --epochs=1
--train-limit=2048``) into a temporary directory; the figures do not depend on the weights. It then
starts the server on 127.0.0.1 (``--threads`` torch threads, the same count the in-process pass
gets) and measures, on real MNIST test images:

- latency at batch 1: p50 and p99 of ``--requests`` sequential requests on one keep-alive
  connection (UINT8 ``[1, 28, 28]``, both outputs), request body encoded beforehand;
- throughput at batch 64 and 256: images/s over ``--rounds`` sequential requests per batch size;
- each over JSON and over the binary tensor data extension (raw UINT8 in, raw outputs back: what
  tritonclient and KServe's client send by default);
- the same batches through the model in this process (``softmax(model(x))`` on the already
  normalised tensor, under ``torch.inference_mode``): what HTTP, JSON and preprocessing add to.
  In-process and HTTP alternate request by request, so both see the same load from elsewhere.

Goals checked: batch-1 p50 <= 3 ms over HTTP (JSON); binary throughput at batch 256 >= 90% of
in-process.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import torch  # noqa: E402

from trainer.data import normalise, read_idx  # noqa: E402
from trainer.mnist_files import TEST_IMAGES, find_file  # noqa: E402
from trainer.model import MnistCNN  # noqa: E402

P50_GOAL_MS = 3.0
BINARY_THROUGHPUT_GOAL = 0.9


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env(threads: int) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**base, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO_ROOT)}


def train(data: str, output: Path) -> None:
    command = [sys.executable, "-m", "trainer", f"--data={data}", f"--checkpoint-dir={output}"]
    command += ["--epochs=1", "--batch-size=64", "--train-limit=2048"]
    subprocess.run(command, cwd=REPO_ROOT, env=env(1), check=True, capture_output=True)


def body(images: torch.Tensor) -> bytes:
    tensor = {"name": "images", "datatype": "UINT8", "shape": list(images.shape)}
    return json.dumps({"inputs": [{**tensor, "data": images.reshape(-1).tolist()}]}).encode()


def binary_body(images: torch.Tensor) -> tuple[bytes, dict[str, str]]:
    """The same request with the binary tensor data extension, every output asked back in binary
    (what tritonclient sends by default)."""
    raw = images.contiguous().numpy().tobytes()
    tensor = {"name": "images", "datatype": "UINT8", "shape": list(images.shape)}
    header = json.dumps(
        {
            "inputs": [{**tensor, "parameters": {"binary_data_size": len(raw)}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + raw, headers


JSON_HEADERS = {"Content-Type": "application/json"}


def post(
    connection: http.client.HTTPConnection, payload: bytes, headers: dict[str, str] = JSON_HEADERS
) -> float:
    """One inference request; its wall time in seconds."""
    start = time.perf_counter()
    connection.request("POST", "/v2/models/mnist/infer", payload, headers)
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    if response.status != 200:
        raise SystemExit(f"bench_serve: the server answered {response.status}")
    return elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def wait_ready(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"bench_serve: the server exited with {process.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/v2/health/ready")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("bench_serve: the server did not become ready in 120 s")


def measure(args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    images = read_idx(find_file(Path(args.data), TEST_IMAGES) or Path(args.data) / TEST_IMAGES)
    torch.set_num_threads(args.threads)
    module = MnistCNN()
    module.load_state_dict(torch.load(model_dir / "model.pt", map_location="cpu", weights_only=True))
    module.eval()
    module = module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    results: dict[str, Any] = {}

    def forward(batch: torch.Tensor) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            torch.softmax(module(batch), dim=1).tolist()
        return time.perf_counter() - start

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "trainer.serve", f"--model-uri={model_dir}", "--host=127.0.0.1"]
        + [f"--port={port}", f"--threads={args.threads}"],
        cwd=REPO_ROOT,
        env=env(args.threads),
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_ready(port, server)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        # HTTP and in-process alternate request by request, so both see the same machine load.
        for batch in (1, 64, 256):
            # What the server does with a UINT8 [N, 28, 28] request (trainer/serve/protocol.py).
            pixels = images[:batch].reshape(batch, 1, 28, 28)
            x = normalise(pixels).contiguous(memory_format=torch.channels_last)
            payload = body(images[:batch])
            binary, binary_headers = binary_body(images[:batch])
            count = args.requests if batch == 1 else args.rounds
            for _ in range(50 if batch == 1 else 2):
                forward(x)
                post(connection, payload)
                post(connection, binary, binary_headers)
            local, remote, remote_binary = [], [], []
            for _ in range(count):
                local.append(forward(x))
                remote.append(post(connection, payload))
                remote_binary.append(post(connection, binary, binary_headers))
            timings = (("inprocess", local), ("http", remote), ("binary", remote_binary))
            for name, times in timings:
                if batch == 1:
                    results[f"{name}_b1_p50_ms"] = 1000 * percentile(times, 0.5)
                    results[f"{name}_b1_p99_ms"] = 1000 * percentile(times, 0.99)
                else:
                    results[f"{name}_b{batch}_images_per_s"] = batch * count / sum(times)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="MNIST directory (the t10k images file)")
    parser.add_argument("--model-dir", type=Path, help="a run's output dir (model.pt, SHA256SUMS)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, server and in-process")
    parser.add_argument("--requests", type=int, default=1000, help="batch-1 requests timed")
    parser.add_argument("--rounds", type=int, default=40, help="requests per batch size for throughput")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch:
        model_dir = args.model_dir
        if model_dir is None:
            model_dir = Path(scratch) / "run"
            train(args.data, model_dir)
        results = measure(args, model_dir)
    results["machine"] = f"{platform.machine()} {os.cpu_count()} CPUs, torch {torch.__version__}"
    results["load_average_before"] = [round(x, 2) for x in load]
    results["threads"] = args.threads
    print(f"{'':24}{'HTTP JSON':>12}{'HTTP binary':>13}{'in-process':>12}{'JSON':>7}{'binary':>8}")
    for q in ("p50", "p99"):
        cells = [results[f"{name}_b1_{q}_ms"] for name in ("http", "binary", "inprocess")]
        print(f"{f'batch 1 {q} (ms)':24}{cells[0]:12.2f}{cells[1]:13.2f}{cells[2]:12.2f}")
    for batch in (64, 256):
        rates = [results[f"{name}_b{batch}_images_per_s"] for name in ("http", "binary", "inprocess")]
        label = f"batch {batch} (images/s)"
        print(
            f"{label:24}{rates[0]:12.0f}{rates[1]:13.0f}{rates[2]:12.0f}"
            f"{rates[0] / rates[2]:7.0%}{rates[1] / rates[2]:8.0%}"
        )
    ratio = results["binary_b256_images_per_s"] / results["inprocess_b256_images_per_s"]
    results["goal_b1_p50"] = results["http_b1_p50_ms"] <= P50_GOAL_MS
    results["goal_b256_binary_ratio"] = ratio >= BINARY_THROUGHPUT_GOAL
    print(f"goal batch-1 p50 (JSON) <= {P50_GOAL_MS} ms: {'met' if results['goal_b1_p50'] else 'MISSED'}")
    verdict = "met" if results["goal_b256_binary_ratio"] else "MISSED"
    print(f"goal batch-256 binary >= {BINARY_THROUGHPUT_GOAL:.0%} of in-process: {verdict}")
    print(f"load average before: {results['load_average_before']}; {results['machine']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
