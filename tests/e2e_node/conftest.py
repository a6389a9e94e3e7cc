"""The real node tier's session: the local cluster (tests/e2e_local's control plane, KWOK's fake nodes)
with a real kubelet node joined to it (infra/localcluster/node), the real Pulumi CLI and a file
backend.

The tier runs as root (it installs Debian packages, makes an interface and runs containers) and stops
before it collects anything, with one line (pytest's usage error, exit 4), where it cannot run. Its
teardown stops the node and checks that nothing is left behind: a leftover process, interface, iptables
chain, mount, network namespace or cgroup fails the session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest

from infra.localcluster import build, cluster
from infra.localcluster.node import host, mirror
from infra.localcluster.node import node as real_node
from infra.localcluster.node.config import NODE_LABEL, NODE_NAME, NODE_TAINT
from tests.e2e import live
from tests.e2e.project import Backend
from tests.e2e.stacks import job_config
from tests.e2e_local import scenario
from tests.e2e_local.conftest import TOOLS, engine_env

ROOT = Path(__file__).resolve().parents[2]
MNIST = ROOT.parent / "shared" / "data" / "mnist"
TRAINER_UID = 1000
# The class of the static volumes: no StorageClass object, so no provisioner acts on it.
STATIC_CLASS = "ddp-mnist-node-static"


def pytest_configure(config: pytest.Config) -> None:
    """Stop at once, with one line, when the tier cannot run (exit 4, before any collection)."""
    if not config.option.markexpr or "e2e_node" not in config.option.markexpr:
        return
    if os.geteuid() != 0:
        raise pytest.UsageError("e2e-node: run as root (the node installs packages and runs containers)")
    for tool, why in TOOLS:
        if shutil.which(tool) is None:
            raise pytest.UsageError(f"e2e-node: no {tool} on PATH ({why})")
    try:
        host.ensure_packages(print)
        build.build(build.tier_parts("cluster", "node"))
    except (build.BuildError, host.HostError) as error:
        raise pytest.UsageError(f"e2e-node: {error}") from None


@pytest.fixture(scope="session")
def node_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cluster.State]:
    """The local cluster with its real node Ready (and CoreDNS serving), the engine's environment set."""
    state = cluster.State(tmp_path_factory.mktemp("cluster"))
    cluster.up(state)
    try:
        real_node.up(state)
        with engine_env(state, tmp_path_factory.mktemp("pulumi-home")):
            yield state
    finally:
        try:
            left = real_node.down(state, check=False)
        finally:
            scenario.keep_logs(state, "e2e-node")
            cluster.down(state)
    assert not left, f"the node's teardown left {left}"


@pytest.fixture(scope="session")
def node_images(node_cluster: cluster.State) -> dict[str, str]:
    """The images the node has loaded: name -> digest reference (pause, coredns, trainer)."""
    return real_node.loaded_images(node_cluster)


@pytest.fixture(scope="session")
def mnist_mirror(node_cluster: cluster.State) -> Iterator[str]:
    """The HTTPS mirror of `../shared` MNIST on the node's address (node/mirror.py): its base URL."""
    with mirror.serving(MNIST, real_node.dirs_of(node_cluster).cache) as url:
        yield url


# Namespaces placed on the real node as a platform team places one on a node pool: the API server's
# PodNodeSelector and PodTolerationRestriction admission plugins give every pod created in it the node's
# selector and a toleration of its taint, so a stack deployed there needs no placement keys.
PLACED = {
    "scheduler.alpha.kubernetes.io/node-selector": f"{NODE_LABEL[0]}={NODE_LABEL[1]}",
    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
        [{"key": NODE_TAINT[0], "operator": "Exists", "effect": NODE_TAINT[2]}]
    ),
}


def place_on_the_node(namespace: str) -> None:
    """Create `namespace` with the annotations that place its pods on the real node (a stack that
    creates it then adopts it: the provider's create is a server-side apply)."""
    deadline = time.monotonic() + 300
    while live.exists("namespace", namespace):  # an earlier scenario's, still terminating
        assert time.monotonic() < deadline, f"namespace {namespace} still terminating after 300 s"
        time.sleep(2)
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "annotations": PLACED},
    }
    live.kubectl("apply", "--server-side", "--field-manager=cluster-admin", "-f", "-", stdin=json.dumps(body))


@pytest.fixture(scope="session")
def backend(node_cluster: cluster.State, tmp_path_factory: pytest.TempPathFactory) -> Backend:
    return Backend.create(tmp_path_factory.mktemp("pulumi"))


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> None:
    """On a failure, the cluster's warning events and the logs of its failed containers go into the
    report (before the test's stacks are destroyed, which takes the pods and their logs)."""
    if call.when == "call" and call.excinfo is not None and "node_cluster" in item.fixturenames:
        try:
            events = live.kubectl("get", "events", "-A", "--field-selector", "type=Warning")
        except (RuntimeError, subprocess.TimeoutExpired):
            return
        item.add_report_section("call", "warning events", events[-6000:])
        item.add_report_section("call", "failed containers' logs", failed_logs())


def failed_logs(most: int = 8) -> str:
    """The last lines of each container that ended with a non-zero code (its current run, or the one
    before a restart), `most` of them."""
    try:
        pods = json.loads(live.kubectl("get", "pods", "-A", "-o", "json"))["items"]
    except (RuntimeError, subprocess.TimeoutExpired, ValueError) as error:
        return f"(pods not listed: {error})"
    found = []
    for pod in pods:
        meta = pod["metadata"]
        for status in pod.get("status", {}).get("containerStatuses") or []:
            for state, previous in (
                (status.get("state") or {}, False),
                (status.get("lastState") or {}, True),
            ):
                ended = state.get("terminated") or {}
                if ended.get("exitCode", 0) == 0:
                    continue
                argv = ["logs", "-n", meta["namespace"], meta["name"], "-c", status["name"], "--tail=40"]
                try:
                    text = live.kubectl(*argv, *(["--previous"] if previous else []))
                except (RuntimeError, subprocess.TimeoutExpired) as error:
                    text = f"(no logs: {error})"
                found.append(
                    f"--- {meta['namespace']}/{meta['name']} {status['name']} exit {ended['exitCode']}"
                    f"{' (before a restart)' if previous else ''}\n{text[-3000:]}"
                )
    return "\n".join(found[:most]) or "(no container ended with a non-zero code)"


def static_volume(name: str, path: Path, namespace: str, claim: str) -> dict:
    """A hostPath PersistentVolume of `path`, bound ahead to the claim `namespace/claim`."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": STATIC_CLASS,
            "hostPath": {"path": str(path), "type": "Directory"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }


@pytest.fixture(scope="session")
def volumes_for(node_cluster: cluster.State) -> Iterator[Callable[[str], dict[str, Path]]]:
    """The data and checkpoint volumes of a job stack in a namespace: two host directories owned by
    the trainer's uid, as a file store's export would give them (a hostPath volume takes no fsGroup),
    the data one holding MNIST as the stack's seed Job leaves it; each a PersistentVolume bound
    ahead to the stack's claim. This kernel has no NFS client, so csi-driver-nfs cannot mount here."""
    made: list[str] = []

    def make(namespace: str) -> dict[str, Path]:
        root = node_cluster.directory / "volumes" / namespace
        paths = {"data": root / "data", "checkpoints": root / "checkpoints"}
        for path in paths.values():
            path.mkdir(parents=True)
        # What the stack's seed Job does (`trainer.seed --to /data/mnist`), by the same code.
        seed = [
            sys.executable,
            "-m",
            "trainer.seed",
            "--from",
            str(MNIST),
            "--to",
            str(paths["data"] / "mnist"),
        ]
        subprocess.run(seed, check=True, capture_output=True, cwd=ROOT)
        for path in [*paths.values(), *paths["data"].rglob("*")]:
            os.chown(path, TRAINER_UID, TRAINER_UID)
        for kind, path in paths.items():
            name = f"{namespace}-{kind}"
            volume = static_volume(name, path, namespace, f"ddp-mnist-{kind}")
            live.kubectl("apply", "-f", "-", stdin=json.dumps(volume))
            made.append(name)
        return paths

    yield make
    if made:
        live.kubectl("delete", "pv", *made, "--ignore-not-found", "--wait=false")


def node_job_config(image: str, namespace: str, **overrides: str) -> dict[str, str]:
    """The dev stack's twin as a job stack placed on the real node, its claims on the static volumes,
    no seed (the volume holds MNIST), no export and no server (those need MinIO in the cluster)."""
    return job_config(
        image,
        *scenario.KEYS,
        namespace=namespace,
        storageProvider="existing",
        storageClassName=STATIC_CLASS,
        seedSource="none",
        jobModelExport="false",
        tensorboardDeploy="false",
        serveKind="none",
        jobCpuRequest="900m",
        jobWaitTimeoutSeconds="600",
        jobNodeSelector=f'["{NODE_LABEL[0]}={NODE_LABEL[1]}"]',
        jobTolerations=f'["{NODE_TAINT[0]}={NODE_TAINT[1]}:{NODE_TAINT[2]}"]',
        **overrides,
    )


def show_logs(namespace: str) -> None:
    """Print the last lines of every container of `namespace` (pytest shows them with a failure)."""
    try:
        print(
            live.kubectl(
                "logs", "-n", namespace, "--all-containers", "--prefix", "--tail=40", "-l", "job-name"
            )
        )
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"no logs from {namespace}: {error}")


INDEX = "batch.kubernetes.io/job-completion-index"
ACCURACY = re.compile(r"test_acc=(\d+\.\d+)%")


def final_accuracy_on_the_node(namespace: str) -> float:
    """The last test accuracy rank 0 logged (read through the kubelet), once both of the job's pods
    ran on the real node and succeeded."""
    pods = live.items("pods", namespace, INDEX)
    assert sorted(p["spec"]["nodeName"] for p in pods) == [NODE_NAME, NODE_NAME]
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}
    rank0 = next(p for p in pods if p["metadata"]["labels"][INDEX] == "0")
    logs = live.kubectl("logs", "-n", namespace, rank0["metadata"]["name"])
    accuracies = [float(a) for a in ACCURACY.findall(logs)]
    assert accuracies, logs[-3000:]
    return accuracies[-1]


MILESTONES = ("process", "main", "imports", "data", "rendezvous", "model", "first_step")


def _unix(stamp: str) -> float:
    """An API timestamp (RFC 3339, whole seconds) as a Unix time."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def startup_table(namespace: str, checkpoints: Path) -> str:
    """Each pod's start-up on the node, in seconds from the first pod's creation: scheduled, container
    started (the kubelet's, whole seconds), then its rank's own milestones from metrics.json, the
    first epoch at 99% (rank 0) and the container's end. A figure printed for BENCHMARKS, never asserted."""
    pods = sorted(live.items("pods", namespace, INDEX), key=lambda p: int(p["metadata"]["labels"][INDEX]))
    (metrics_file,) = checkpoints.rglob("metrics.json")
    metrics = json.loads(metrics_file.read_text())
    marks = metrics.get("milestones_unix_per_rank") or []
    reached = next((h for h in metrics["history"] if h["test_accuracy"] >= 0.99), None)
    zero = min(_unix(p["metadata"]["creationTimestamp"]) for p in pods)
    columns = ("scheduled", "started", *MILESTONES, "99%", "ended")
    lines = [f"{'pod':>24} " + " ".join(f"{c:>10}" for c in columns)]
    for rank, pod in enumerate(pods):
        status = pod["status"]
        scheduled = next(c for c in status["conditions"] if c["type"] == "PodScheduled")
        (container,) = status["containerStatuses"]
        ended = container["state"]["terminated"]
        figures = {
            "scheduled": _unix(scheduled["lastTransitionTime"]),
            "started": _unix(ended["startedAt"]),
            "ended": _unix(ended["finishedAt"]),
            **(marks[rank] if rank < len(marks) else {}),
        }
        if rank == 0 and reached is not None:
            figures["99%"] = metrics["started_unix"] + reached["elapsed_s"]
        cells = [f"{figures[c] - zero:10.2f}" if c in figures else f"{'-':>10}" for c in columns]
        lines.append(f"{pod['metadata']['name']:>24} " + " ".join(cells))
    return "\n".join(lines)
