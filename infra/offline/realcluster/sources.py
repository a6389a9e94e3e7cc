"""What the tier installs from the pinned modules rather than from infra/manifests or GitHub.

- The training operator v1.9.4: its module's `manifests/overlays/standalone`, as it is: what a platform
  stack installed from upstream's git URL before the manifests were vendored (scenario 23 moves the
  session's platform stack from it to the vendored default), and its sibling `overlays/kubeflow`, the
  operator as Kubeflow installs it (scenario 17).
- csi-driver-nfs v4.11.0's Helm chart (`nfsCsiChart` of the prerequisites stack): upstream's archive,
  kept in `charts/` (the module proxy does not serve that repository) and checked by its sha256.

Kubeflow Trainer v2 (with JobSet) and KServe come from `infra/manifests`, as on any cluster; that those
files are what the pinned modules build is `manifests.py`'s check (tests/e2e_local scenario 23).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from infra.offline.realcluster.build import module_dir
from infra.offline.realcluster.cluster import ClusterError
from infra.offline.realcluster.parts import PARTS
from infra.program.settings.prerequisites import NFS_CSI_VERSION

OPERATOR_MODULE = "github.com/kubeflow/training-operator"

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
    """The operator's standalone overlay in the pinned module (upstream's git URL at the tag)."""
    return (
        module_dir(PARTS["training-operator"].directory, OPERATOR_MODULE)
        / "manifests"
        / "overlays"
        / "standalone"
    )
