"""A stand-in's process that no longer serves its pod is stopped as a kubelet stops a container:
SIGTERM, then SIGKILL once the pod's grace period has passed, and nothing waits for it meanwhile (a
Deployment's rolling update has its new pod up while the old one ends). Kubeflow Trainer v2.3.0 with
TrainJobStatus on is such a process: its status server's `Start` never returns after SIGTERM
(`pkg/statusserver/server.go`: `serverShutdown` is never closed)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.localcluster.standins import LocalPod, LocalPods, Running, StandIn

STAND_IN = StandIn("ctl-system", "ctl", "manager", "ctl", ())
DEAF = ["bash", "-c", 'trap "" TERM; exec sleep 60']  # ignores SIGTERM, as the hung controller does
POLITE = ["sleep", "60"]  # ends on SIGTERM


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[LocalPods]:
    client: Any = None  # stop, reap and stop_all read nothing from the cluster
    local = LocalPods((STAND_IN,), client, tmp_path, tmp_path / "kubeconfig", lambda name: tmp_path / name)
    yield local
    for process in [r.process for r in local.running.values()] + [s.process for s in local.stopping]:
        process.kill()
        process.wait()


def _run(pods: LocalPods, key: str, argv: list[str], grace: int | None, tmp_path: Path) -> subprocess.Popen:
    spec: dict = {"containers": [{"name": "manager"}]}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    process = subprocess.Popen(argv)
    comm = Path(f"/proc/{process.pid}/comm")
    deadline = time.monotonic() + 5
    while argv[0] == "bash" and "sleep" in argv[-1] and comm.read_text().strip() != "sleep":
        assert time.monotonic() < deadline, "bash never exec'd sleep"
        time.sleep(0.01)  # until bash has set its trap and exec'd
    pod = {"metadata": {"name": f"{key}-local", "namespace": "ctl-system"}, "spec": spec}
    pods.running[key] = Running(process, "digest", LocalPod(pod, {}, tmp_path))
    return process


def test_a_process_deaf_to_sigterm_holds_up_nothing_and_is_killed_after_its_grace_period(
    pods: LocalPods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    process = _run(pods, STAND_IN.key, DEAF, 1, tmp_path)
    started = time.monotonic()
    pods.stop(STAND_IN.key)
    assert time.monotonic() - started < 0.5  # not waited for
    assert STAND_IN.key not in pods.running  # a new process may start at once
    pods.reap()
    assert process.poll() is None and len(pods.stopping) == 1  # within its grace period
    time.sleep(1.1)
    pods.reap()
    assert process.poll() == -9 and pods.stopping == []  # SIGKILL, as a kubelet after the grace period
    assert (
        "supervisor: ctl-system/ctl: old process killed after its grace period (1 s)"
        in capsys.readouterr().out
    )


def test_a_process_that_ends_on_sigterm_is_forgotten_once_ended_and_the_default_grace_is_30_s(
    pods: LocalPods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    process = _run(pods, STAND_IN.key, POLITE, None, tmp_path)
    pods.stop(STAND_IN.key)
    (stopping,) = pods.stopping
    assert stopping.deadline - stopping.since == 30  # the Pod API's default terminationGracePeriodSeconds
    process.wait(5)
    pods.reap()
    assert process.returncode == -15 and pods.stopping == []
    assert "supervisor: ctl-system/ctl: old process ended" in capsys.readouterr().out


def test_a_process_that_exited_on_its_own_is_not_signalled_and_its_code_is_said(
    pods: LocalPods, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    process = _run(pods, STAND_IN.key, ["bash", "-c", "exit 3"], 1, tmp_path)
    process.wait(5)
    pods.stop(STAND_IN.key)
    assert pods.stopping == [] and STAND_IN.key not in pods.running
    assert "supervisor: ctl-system/ctl: process exited with 3\n" in capsys.readouterr().out


def test_stop_all_ends_every_process_together_within_its_timeout(pods: LocalPods, tmp_path: Path) -> None:
    deaf = [_run(pods, key, DEAF, 30, tmp_path) for key in ("a/one", "a/two")]
    polite = _run(pods, "a/three", POLITE, 30, tmp_path)
    pods.stop("a/one")  # one already stopping, two still running
    started = time.monotonic()
    pods.stop_all(timeout=1)
    assert time.monotonic() - started < 1.8  # one timeout for all, not one each
    assert [p.returncode for p in deaf] == [-9, -9] and polite.returncode == -15
    assert pods.running == {} and pods.stopping == []
