"""The platform's upstream manifests, vendored in `infra/manifests/`: what a platform stack applies when
no `*Source` key names another source.

Each component's files are built from a pinned Go module (`make manifests`,
`infra/localcluster/manifests.py`) and `infra/manifests/index.yaml` records the module, its
version, the tag's commit and every file's sha256. The program applies a file only when its sha256 is
the recorded one, so an edit that bypassed `make manifests` stops `pulumi up` with one line, before any
resource is registered, instead of reaching a cluster with cluster-admin; and nothing is downloaded
(an air-gapped cluster needs no mirror of the manifests, only of the images).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.program.common import yamlio
from infra.program.settings import PROJECT_ROOT, Settings

MANIFESTS = PROJECT_ROOT / "infra" / "manifests"
INDEX = "index.yaml"
KUSTOMIZATION = "kustomization.yaml"  # what makes a vendored directory a kustomize source
TRAINING_OPERATOR = "training-operator"
TRAINER = "kubeflow-trainer"
KSERVE = "kserve"


class ManifestMismatch(ValueError):
    """A vendored file is missing or is not the one the index records; `str()` is the one line shown."""


@dataclass(frozen=True)
class Vendored:
    """One component's vendored manifests, as the index records them."""

    name: str
    title: str
    version: str
    apply: str  # what the program applies, relative to infra/manifests: a kustomize directory or a file
    sums: dict[str, str]  # file under infra/manifests -> its sha256
    modules: tuple[dict[str, str], ...]  # module, version, sum (go.sum), commit, repository

    @property
    def path(self) -> Path:
        return MANIFESTS / self.apply

    @property
    def shown(self) -> str:
        """The applied path relative to the project root, as docs and goldens name it."""
        return str(self.path.relative_to(PROJECT_ROOT))

    @property
    def manifest(self) -> Path:
        """The file holding the objects (a kustomize directory's `resources` file, or the file itself)."""
        return self.path / "manifests.yaml" if (self.path / KUSTOMIZATION).is_file() else self.path

    def mismatches(self) -> list[str]:
        """One line per recorded file that is missing or whose sha256 is not the recorded one."""
        found = []
        for relative, recorded in self.sums.items():
            digest = file_sha256(MANIFESTS / relative)
            if digest != recorded:
                found.append(
                    f"infra/manifests/{relative}: sha256 {digest}, not {recorded} as infra/manifests/{INDEX} "
                    "records (regenerate it with `make manifests`, or restore it from git)"
                )
        return found

    def verified(self) -> str:
        """The absolute path to apply, once every file matches its recorded sha256."""
        found = self.mismatches()
        if found:
            raise ManifestMismatch(f"vendored {self.title} {self.version}: {found[0]}")
        return str(self.path)


def file_sha256(path: Path) -> str:
    """The file's sha256 ("missing" when there is none), cached by its size and modification time."""
    try:
        status = path.stat()
    except FileNotFoundError:
        return "missing"
    return _sha256(str(path), status.st_size, status.st_mtime_ns)


@functools.cache
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@functools.cache
def index() -> dict[str, Vendored]:
    """Every vendored component, by name (infra/manifests/index.yaml)."""
    raw: dict[str, Any] = yamlio.load((MANIFESTS / INDEX).read_text())
    return {
        name: Vendored(
            name=name,
            title=entry["title"],
            version=entry["version"],
            apply=entry["apply"],
            sums=dict(entry["sha256"]),
            modules=tuple(entry["modules"]),
        )
        for name, entry in raw.items()
    }


def vendored(name: str) -> Vendored:
    return index()[name]


def applied(settings: Settings) -> list[Vendored]:
    """The vendored components this stack applies: each it installs without a source of its own."""
    return [
        vendored(name)
        for name, installs, source in (
            (TRAINING_OPERATOR, settings.operator_install, settings.operator_source),
            (TRAINER, settings.trainer_install, settings.trainer_source),
            (KSERVE, settings.kserve_install, settings.kserve_source),
        )
        if installs and not source
    ]


def nfs_csi_chart() -> str:
    """The vendored csi-driver-nfs chart archive's absolute path, once its sha256 is upstream's."""
    from infra.program.settings.prerequisites import NFS_CSI_CHART, NFS_CSI_CHART_SHA256, NFS_CSI_VERSION

    digest = file_sha256(PROJECT_ROOT / NFS_CSI_CHART)
    if digest != NFS_CSI_CHART_SHA256:
        raise ManifestMismatch(
            f"vendored csi-driver-nfs chart {NFS_CSI_VERSION}: {NFS_CSI_CHART}: sha256 {digest}, not "
            f"upstream's {NFS_CSI_CHART_SHA256}; restore it (git checkout -- {NFS_CSI_CHART})"
        )
    return str(PROJECT_ROOT / NFS_CSI_CHART)


def check(settings: Settings) -> None:
    """Raises ManifestMismatch for the first vendored file this stack would apply that is not the one
    the index records, or the vendored chart when it is not upstream's (before the program registers
    anything)."""
    for component in applied(settings):
        component.verified()
    nfs = settings.stack_role == "prerequisites" and settings.prerequisites_storage == "nfs"
    if nfs and not settings.nfs_csi_chart:
        nfs_csi_chart()
