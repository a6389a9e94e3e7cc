"""`python -m infra.review.render` as a user runs it: files, summary, exit codes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.program.common import yamlio
from infra.stackconfig import ROOT

pytestmark = pytest.mark.slow  # every test runs the render CLI in a process of its own


def _render(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infra.review.render", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _render_stack_file(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """`infra.review.render` on a project whose only stack, 'broken', holds `text`."""
    repo = tmp_path / "repo"
    (repo / "stacks").mkdir(parents=True)
    (repo / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (repo / "stacks" / "Pulumi.broken.yaml").write_text(text)
    code = (
        f"import sys, infra.stackconfig as s, infra.review.render as r; from pathlib import Path; "
        f"s.ROOT = Path({str(repo)!r}); "
        f"sys.exit(r.main(['--stack', 'broken', '--out', {str(tmp_path / 'out')!r}]))"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_render_writes_manifest_and_summary(tmp_path):
    result = _render("--stack", "eks-gpu", "--out", str(tmp_path), "--validate")
    assert result.returncode == 0, result.stderr
    assert "Job                    mnist-r1" in result.stdout
    assert "indexed nodes=2 procs/node=4 gpus/node=4 backend=nccl" in result.stdout
    assert "Pod (effective)        mnist-r1-1-xxxxx          Job/mnist-r1 Index node-rank=1" in result.stdout
    assert "mnist-serve-<hash>-xxxxx  Deployment/mnist-serve Replica" in result.stdout
    assert "Deployment             mnist-serve" in result.stdout
    # The seed Job's pod, two nodes and the server's two replicas.
    assert result.stdout.count("admitted (restricted)") == 5
    # No PyTorchJob in this stack, so no word about its CRD schema.
    assert (
        "validated: built-in objects against Kubernetes 1.33 (strict); LocalQueue: Kueue's CRD schema "
        "(strict); 5 effective pods admitted under Pod Security 'restricted', LimitRange and ResourceQuota"
    ) in result.stdout
    effective = list(yamlio.load_all((tmp_path / "eks-gpu.effective.yaml").read_text()))
    assert [d["metadata"]["generateName"] for d in effective] == [
        "ddp-mnist-seed-",
        "mnist-r1-0-",
        "mnist-r1-1-",
        "mnist-serve-<hash>-",
        "mnist-serve-<hash>-",
    ]
    for written in ("eks-gpu.yaml", "eks-gpu.effective.yaml"):
        assert (tmp_path / written).stat().st_mode & 0o777 == 0o666 & ~_umask(), written
    documents = list(yamlio.load_all((tmp_path / "eks-gpu.yaml").read_text()))
    assert [d["kind"] for d in documents] == [
        "PersistentVolumeClaim",
        "PersistentVolumeClaim",
        "Secret",
        "Secret",  # the read-only pair's (minioReadKeysRequired)
        "ServiceAccount",
        "ServiceAccount",
        "NetworkPolicy",
        "NetworkPolicy",
        "NetworkPolicy",
        "NetworkPolicy",
        "Service",
        "Service",
        "LocalQueue",
        "Job",
        "Job",
        "PodDisruptionBudget",
        "Deployment",
    ]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_refused_pod_fails_validate_with_exit_3_and_writes_nothing(tmp_path):
    """Were the installed operator's template upstream's (no securityContext), --validate refuses the
    Worker pods (the training job's and the smoke check's) in the API server's words, one line per
    failed check."""
    code = (
        "import sys, infra.review.cluster as c, infra.review.effective.pytorchjob as p, "
        "infra.review.render as r; c.RESTRICTED_INIT_CONTAINER_TEMPLATE = p.UPSTREAM_INIT_CONTAINER_TEMPLATE; "
        f"sys.exit(r.main(['--stack', 'dev', '--validate', '--out', {str(tmp_path)!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 3
    assert result.stderr.splitlines() == [
        'render: refused pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "init-pytorch" must set securityContext.allowPrivilegeEscalation=false)',
        'render: refused pods "mnist-r1-worker-0" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "init-pytorch" must set securityContext.capabilities.drop=["ALL"])',
        'render: refused pods "operator-smoke-worker-0" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "init-pytorch" must set securityContext.allowPrivilegeEscalation=false)',
        'render: refused pods "operator-smoke-worker-0" is forbidden: violates PodSecurity "restricted:latest": unrestricted capabilities (container "init-pytorch" must set securityContext.capabilities.drop=["ALL"])',
    ], result.stderr
    assert list(tmp_path.iterdir()) == []


def test_bad_config_exits_2_and_writes_nothing(tmp_path):
    result = _render_stack_file(tmp_path, "config:\n  ddp-mnist:nfsServer: nfs\n  ddp-mnist:jobNodes: 0\n")
    assert result.returncode == 2
    assert result.stderr.strip() == "render: config ddp-mnist:jobNodes=0 is invalid: must be >= 1"
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def test_unknown_stack_exits_2(tmp_path):
    result = _render("--stack", "prod", "--out", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.startswith("render: no stack 'prod'")
    assert (
        "(stacks: aks-gpu, aks-platform, dev, dev-prereqs, eks-gpu, eks-platform, gke-gpu, gke-platform, "
        "gke-trainjob)" in result.stderr
    )
    assert list(tmp_path.iterdir()) == []


def test_malformed_stack_file_and_missing_crd_exit_2_without_traceback(tmp_path):
    result = _render_stack_file(tmp_path, "config:\n  ddp-mnist:jobNodes: [1\n")
    assert result.returncode == 2
    assert result.stderr.startswith("render: stack 'broken': ") and "is not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr
    missing = _render(
        "--stack", "dev", "--out", str(tmp_path / "out"), "--validate", "--crd", "/no/such.yaml"
    )
    assert missing.returncode == 2
    assert missing.stderr.strip() == "render: --crd /no/such.yaml: no such file"
    assert not (tmp_path / "out").exists()


def test_render_needs_the_program_environment_only(tmp_path):
    """`make render` runs in .venv-infra, which has no torch: rendering never imports it."""
    code = (
        "import sys, infra.review.render as r; "
        f"code = r.main(['--stack', 'gke-gpu', '--out', {str(tmp_path)!r}, '--validate']); "
        "assert 'torch' not in sys.modules, 'render imported torch'; sys.exit(code)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    planned = subprocess.run(
        ["make", "-n", "render", "STACK=dev"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert ".venv-infra/bin/python -m infra.review.render --stack dev --validate" in planned.stdout
    assert ".venv/bin/" not in planned.stdout.replace(".venv-infra/bin/", "")


def test_a_job_stack_its_platform_stack_contradicts_exits_2_with_one_line(tmp_path):
    repo = tmp_path / "repo"
    (repo / "stacks").mkdir(parents=True)
    (repo / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    (repo / "stacks" / "Pulumi.plat.yaml").write_text(
        "config:\n  ddp-mnist:stackRole: platform\n  ddp-mnist:operatorInstall: true\n"
    )
    (repo / "stacks" / "Pulumi.team.yaml").write_text(
        "config:\n  ddp-mnist:stackRole: job\n  ddp-mnist:operatorInstall: false\n"
        "  ddp-mnist:platformStack: plat\n  ddp-mnist:nfsServer: nfs.example.internal\n"
        "  ddp-mnist:seedSource: none\n  ddp-mnist:kservePresent: true\n"
    )
    code = (
        f"import sys, infra.stackconfig as s, infra.review.render as r; from pathlib import Path; "
        f"s.ROOT = Path({str(repo)!r}); "
        f"sys.exit(r.main(['--stack', 'team', '--out', {str(tmp_path / 'out')!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr == (
        "render: stack team declares kservePresent=true, but its platform stack plat says false "
        "(remove kservePresent from stack team: it comes from the platform stack)\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_vendored_manifest_not_as_recorded_exits_2_with_one_line(tmp_path):
    """A patch slipped into the vendored operator's kustomization (not made by `make manifests`)."""
    copy = shutil.copytree(ROOT / "infra" / "manifests", tmp_path / "manifests")
    kustomization = copy / "training-operator" / "kustomization.yaml"
    kustomization.write_text(kustomization.read_text() + "patches:\n  - path: /tmp/anything.yaml\n")
    code = (
        "import sys, infra.program.common.vendored as v, infra.review.render as r; from pathlib import Path; "
        f"v.MANIFESTS = Path({str(copy)!r}); "
        f"sys.exit(r.main(['--stack', 'aks-platform', '--out', {str(tmp_path / 'out')!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "render: vendored Kubeflow training operator v1.9.4: "
        "infra/manifests/training-operator/kustomization.yaml: sha256 "
    )
    assert line.endswith("(regenerate it with `make manifests`, or restore it from git)")
    assert not (tmp_path / "out").exists()


def test_the_summary_names_each_vendored_install_and_its_objects(tmp_path):
    result = _render("--stack", "gke-platform", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = [" ".join(line.split()) for line in result.stdout.splitlines()]
    assert (
        "kustomize training-operator-manifests source=infra/manifests/training-operator (vendored v1.9.4, 14 objects)"
        in rows
    )
    assert (
        "kustomize trainer-v2-manifests source=infra/manifests/kubeflow-trainer (vendored v2.3.0, 35 objects)"
        in rows
    )
    assert (
        "yaml kserve-manifests source=infra/manifests/kserve/kserve.yaml (vendored v0.20.0, 38 objects)"
        in rows
    )
