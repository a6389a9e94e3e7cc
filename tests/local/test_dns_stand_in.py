"""The Worker init container's resolver check, as rendered, against the local stand-in for cluster DNS.

The operator's restricted template runs `getent hosts <master>` (see
infra/program/platform/training_operator.py for why not busybox's nslookup); here that command line runs under
`sh` with the scheduler's shims, so the loop's exit status follows whether the Master's name is published."""

from __future__ import annotations

import subprocess
from pathlib import Path

from infra.local.dns import main as dns
from infra.local.supervisor import Supervisor
from infra.local.workloads import plan_stack
from tests.infra.conftest import render_config


def test_getent_stand_in_exit_statuses_are_musl_getents(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LOCAL_DNS_DIR", str(tmp_path))
    (tmp_path / "mnist-r1-master-0").touch()
    assert dns(["getent", "hosts", "mnist-r1-master-0"]) == 0
    assert capsys.readouterr().out.split() == ["127.0.0.1", "mnist-r1-master-0"]
    assert dns(["getent", "hosts", "mnist-r1-master-0.ddp-mnist.svc.cluster.local"]) == 0
    capsys.readouterr()
    assert dns(["getent", "hosts", "mnist-r1-worker-0"]) == 2
    assert capsys.readouterr().out == ""
    assert dns(["getent", "passwd", "root"]) == 1
    assert dns(["nslookup", "mnist-r1-master-0"]) == 0
    assert dns(["nslookup", "mnist-r1-worker-0"]) == 1


def _worker_init(tmp_path: Path):
    job = plan_stack(render_config({"jobNodes": 2}), tmp_path, {})
    supervisor = Supervisor(job)
    (init,) = job.pods[1].init
    assert init.argv[:2] == ["sh", "-c"] and "getent hosts mnist-r1-master-0;" in init.argv[2]
    assert "$(seq 100)" in init.argv[2] and "sleep 2;" in init.argv[2]
    # Two tries, not 100, without the 2 s pause between them: the loop's exit status is under test.
    script = init.argv[2].replace("$(seq 100)", "$(seq 2)").replace("sleep 2;", "sleep 0;")
    argv = [*init.argv[:2], script]
    return supervisor, argv, supervisor.init_env(init.env)


def test_the_rendered_init_container_waits_for_the_master_name_and_passes_once_it_resolves(tmp_path):
    supervisor, argv, env = _worker_init(tmp_path)
    unresolved = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert unresolved.returncode == 1
    assert unresolved.stdout.count("waiting for master") == 2
    (supervisor.dns_dir / "mnist-r1-master-0").touch()  # the Master's pod runs: its name is published
    resolved = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert resolved.returncode == 0, resolved.stdout + resolved.stderr
    assert "waiting for master" not in resolved.stdout
