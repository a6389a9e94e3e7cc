"""The stack's model server after its training job succeeded: its pods run locally behind a stand-in
for their Service (`infra.local.serve`), the whole MNIST test set goes through it over HTTP,
and the served accuracy must be the trainer's own (its metrics.json), else ServeFailed. Then the
server is stopped with SIGTERM, or kept running until Ctrl-C (--keep-serving).
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from infra.local.evaluate import evaluate, find_test_set, load_test_set
from infra.local.plan import JobPlan
from infra.local.serve import (
    LocalDeployment,
    LocalService,
    ServeFailed,
    local_service,
    plan_servers,
    server_pods,
)
from infra.local.services import SHARED_MNIST
from infra.local.workloads import secret_resolver
from infra.review.manifest import Rendering
from infra.stackconfig import ROOT


@dataclass
class ServeOptions:
    port: int | None = None  # the local Service's port (None: the stack's servePort; 0: a free one)
    keep_serving: bool = False  # leave the server running until Ctrl-C
    batch: int = 0  # images per request (0: the stack's serveMaxBatch)
    ready_timeout: float = 0  # seconds for each pod to get Ready (0: the stack's serveWaitTimeoutSeconds)


def serve_model(
    rendering: Rendering,
    pods: list[Any],
    root: Path,
    overrides: dict[str, str],
    job: JobPlan,
    out: TextIO,
    options: ServeOptions | None = None,
) -> None:
    """The stack's server pods after the job's success, as the cluster runs them, behind a local Service;
    the whole test set through it; its accuracy must be the trainer's own (else ServeFailed)."""
    settings, options = rendering.settings, options or ServeOptions()
    plans = plan_servers(pods, root, secret_resolver(rendering, overrides), overrides)
    port = settings.serve_port if options.port is None else options.port
    owner = server_pods(pods)[0].owner.replace("/", " ")
    serve_url = rendering.outputs.get("serveUrl", "")
    with local_service(port, chosen=options.port is not None, out=out) as service:
        say(
            f"[local] {owner}: {len(plans)} local server process(es) stand in "
            f"for its pods, and a local proxy at {service.url} for its Service "
            f"({serve_url})",
            out,
        )
        deployment = LocalDeployment(
            service, out, ROOT, options.ready_timeout or settings.serve_wait_timeout_seconds
        )
        try:
            deployment.start(plans)
            model = next(
                (a.split("=", 1)[1] for a in plans[0].argv if a.startswith("--model-name=")), "mnist"
            )
            check_served_accuracy(service, model, root, job, options.batch or settings.serve_max_batch, out)
            say_how_to_query(service, model, serve_url, out)
            if options.keep_serving:
                keep_serving(service, out)
        finally:
            deployment.stop()


def check_served_accuracy(
    service: LocalService, model: str, root: Path, job: JobPlan, batch: int, out: TextIO
) -> None:
    """The whole test set through the Service, `batch` images a request; says the served accuracy
    beside the trainer's and the latencies; ServeFailed when the counts of correct labels differ."""
    images, labels = load_test_set(find_test_set(root / "pvc", SHARED_MNIST))
    result = evaluate(service.url, model, images, labels, batch)
    metrics = json.loads((job.output_dir / "metrics.json").read_text()) if job.output_dir else {}
    trained = metrics.get("final_test_accuracy")
    figure = f"{100 * trained:.2f}%" if isinstance(trained, float) else "missing"
    say(
        f"[local] served accuracy {100 * result.accuracy:.2f}% ({result.correct}/{result.total} test "
        f"images over HTTP, {len(result.latencies)} requests of up to {batch}); the trainer's "
        f"metrics.json final_test_accuracy {figure}",
        out,
    )
    say(
        f"[local] latency per request p50 {1000 * result.percentile(0.5):.0f} ms, p99 "
        f"{1000 * result.percentile(0.99):.0f} ms; {result.total / result.seconds:.0f} images/s",
        out,
    )
    if not isinstance(trained, float) or round(trained * result.total) != result.correct:
        raise ServeFailed(
            f"served accuracy {result.correct}/{result.total} differs from the trainer's "
            f"final_test_accuracy {trained} in {job.output_dir}/metrics.json"
        )


def say_how_to_query(service: LocalService, model: str, serve_url: str, out: TextIO) -> None:
    """A `curl` against the local Service, and the stack's own URL in the cluster."""
    body = (
        """'import json; print(json.dumps({"inputs": [{"name": "images", "shape": [1, 28, 28], """
        """"datatype": "UINT8", "data": [0] * 784}]}))'"""
    )
    say(
        f"[local] query it by hand: curl -s {service.url}/v2/models/{model}/ready; "
        f"python3 -c {body} | curl -s {service.url}/v2/models/{model}/infer "
        "-H 'Content-Type: application/json' -d @-",
        out,
    )
    say(f"[local] in the cluster: {serve_url}", out)


def keep_serving(service: LocalService, out: TextIO) -> None:
    """--keep-serving: the server stays up until Ctrl-C."""
    say(f"[local] --keep-serving: serving at {service.url} until Ctrl-C", out)
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)


def say(line: str, out: TextIO) -> None:
    print(line, file=out, flush=True)
