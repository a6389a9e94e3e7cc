"""What the tier installs from the pinned modules rather than from infra/manifests or GitHub.

- The training operator v1.9.4: its module's `manifests/overlays/standalone`, as it is: what a platform
  stack installed from upstream's git URL before the manifests were vendored (scenario 23 moves the
  session's platform stack from it to the vendored default), and its sibling `overlays/kubeflow`, the
  operator as Kubeflow installs it (scenario 17).
- csi-driver-nfs v4.11.0's Helm chart (`nfsCsiChart` of the prerequisites stack): the program's own
  vendored archive (`infra/charts`, checked by its sha256), named explicitly as a mirror would be.

Kubeflow Trainer v2 (with JobSet) and KServe come from `infra/manifests`, as on any cluster; that those
files are what the pinned modules build is `manifests.py`'s check (tests/e2e_local scenario 23).
"""

from __future__ import annotations

from pathlib import Path

from infra.localcluster.build import module_dir
from infra.localcluster.cluster import ClusterError
from infra.localcluster.parts import PARTS

OPERATOR_MODULE = "github.com/kubeflow/training-operator"


def csi_driver_nfs_chart() -> Path:
    """csi-driver-nfs v4.11.0's chart archive, as upstream publishes it at the tag: the program's vendored
    copy, once its sha256 is upstream's."""
    from infra.program.common.vendored import ManifestMismatch, nfs_csi_chart

    try:
        return Path(nfs_csi_chart())
    except ManifestMismatch as error:
        raise ClusterError(f"sources: {error}") from None


def operator_overlay() -> Path:
    """The operator's standalone overlay in the pinned module (upstream's git URL at the tag)."""
    return (
        module_dir(PARTS["training-operator"].directory, OPERATOR_MODULE)
        / "manifests"
        / "overlays"
        / "standalone"
    )
