"""The operators' manifests from the pinned modules the tier built: what a platform stack installs here
instead of fetching them from GitHub (`operatorSource`, `trainerSource` point at these).

- The training operator v1.9.4: its module's `manifests/overlays/standalone`, as it is.
- KServe v0.20.0: its release manifest, built from the module as upstream builds it (`kserveSource`).
- csi-driver-nfs v4.11.0's Helm chart (`nfsCsiChart` of the prerequisites stack): upstream's archive,
  kept in `charts/` (the module proxy does not serve that repository) and checked by its sha256.
- Kubeflow Trainer v2.3.0: a mirror of its module's `manifests/` in which `third-party/jobset` takes
  JobSet v0.12.0's manifests from the JobSet module (`config/default`, what its release manifest is
  built from) instead of GitHub's release download: the mirror `trainerSource` documents for an
  air-gapped cluster.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import yaml

from infra.offline.realcluster.build import module_dir
from infra.offline.realcluster.cluster import ClusterError
from infra.offline.realcluster.parts import PARTS
from infra.program.settings.prerequisites import NFS_CSI_VERSION

OPERATOR_MODULE = "github.com/kubeflow/training-operator"
KSERVE_MODULE = "github.com/kserve/kserve"
TRAINER_MODULE = "github.com/kubeflow/trainer/v2"
JOBSET_MODULE = "sigs.k8s.io/jobset"


CHARTS = Path(__file__).resolve().parent / "charts"
CSI_DRIVER_NFS_CHART = f"csi-driver-nfs-{NFS_CSI_VERSION.lstrip('v')}.tgz"  # the prerequisites' pin
CSI_DRIVER_NFS_SHA256 = "e44bcd7f6934fe6cb07194a1b6e780ca4a428c5d37330a9db2bfa7a9300c8da5"


def csi_driver_nfs_chart() -> Path:
    """csi-driver-nfs v4.11.0's chart archive, as upstream publishes it at the tag (charts/README.md)."""
    chart = CHARTS / CSI_DRIVER_NFS_CHART
    digest = hashlib.sha256(chart.read_bytes()).hexdigest() if chart.is_file() else "missing"
    if digest != CSI_DRIVER_NFS_SHA256:
        raise ClusterError(f"sources: {chart}: sha256 {digest}, not upstream's {CSI_DRIVER_NFS_SHA256}")
    return chart


def operator_overlay() -> Path:
    return (
        module_dir(PARTS["training-operator"].directory, OPERATOR_MODULE)
        / "manifests"
        / "overlays"
        / "standalone"
    )


def trainer_overlay(directory: Path) -> Path:
    """Write the Trainer v2 mirror under `directory` (replacing an earlier one); its manager overlay."""
    manifests = directory / "trainer-manifests"
    if manifests.exists():
        shutil.rmtree(manifests)
    shutil.copytree(module_dir(PARTS["trainer"].directory, TRAINER_MODULE) / "manifests", manifests)
    for root, dirs, files in os.walk(manifests):  # the module cache's copies are read-only
        for name in [*dirs, *files]:
            path = Path(root) / name
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    manifests.chmod(manifests.stat().st_mode | stat.S_IWUSR)
    jobset = manifests / "third-party" / "jobset"
    kustomization = yaml.safe_load((jobset / "kustomization.yaml").read_text())
    upstream = module_dir(PARTS["jobset"].directory, JOBSET_MODULE) / "config" / "default"
    (jobset / "manifests.yaml").write_text(_kustomize(upstream))
    kustomization["resources"] = ["manifests.yaml"]
    (jobset / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return manifests / "overlays" / "manager"


def kserve_manifest(directory: Path) -> Path:
    """KServe's release manifest as upstream builds it (`hack/release/generate-install.sh`: `kustomize
    build config/overlays/all` without its Namespace) from the pinned module, written under `directory`."""
    upstream = module_dir(PARTS["kserve"].directory, KSERVE_MODULE) / "config" / "overlays" / "all"
    objects = [d for d in yaml.safe_load_all(_kustomize(upstream)) if d and d["kind"] != "Namespace"]
    directory.mkdir(parents=True, exist_ok=True)
    manifest = directory / "kserve.yaml"
    manifest.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return manifest


def _kustomize(directory: Path) -> str:
    if shutil.which("kubectl") is None:
        raise ClusterError("sources: no kubectl on PATH (it renders JobSet's manifests)")
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    if done.returncode != 0:
        raise ClusterError(f"sources: kubectl kustomize {directory} failed: {done.stderr.strip()[-300:]}")
    return done.stdout
