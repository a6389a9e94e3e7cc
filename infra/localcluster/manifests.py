"""Vendor the platform's upstream manifests into `infra/manifests/` from the pinned Go modules
(`make manifests`; `--check` compares instead of writing).

    python -m infra.localcluster.manifests [--check]

What a platform stack applies by default is these files (`infra/program/common/vendored.py` reads them and
refuses one whose sha256 is not the one `infra/manifests/index.yaml` records), never a download: each is
built from the module a wrapper in `parts/` pins (its version in `go.mod`, its content in `go.sum`), the
way upstream's install instructions build it, and the index names the module, its version, the commit
of the tag (the module proxy's `Origin`) and each file's sha256. An upgrade is: the new version in the
wrapper's `go.mod` (and the settings' default), `make manifests`, and a review of the vendored diff and of
the goldens (`make golden`), which show what the stack then applies.

- The training operator: `kubectl kustomize manifests/overlays/standalone` of
  github.com/kubeflow/training-operator (what `kubectl apply -k` of upstream's git URL at the tag applies).
- Kubeflow Trainer v2: `kubectl kustomize manifests/overlays/manager` of github.com/kubeflow/trainer/v2,
  its `third-party/jobset` taking JobSet's release manifest as JobSet's `make artifacts` builds it
  (`kustomize build config/default` of sigs.k8s.io/jobset, whose tag sets the release image) instead of
  GitHub's release download.
- KServe: the release manifest as upstream commits it with the tag (`install/<tag>/kserve.yaml`,
  written by `hack/release/generate-install.sh`), byte for byte.

Exit codes: 0 written (or, with --check, the vendored files are what the modules build); 1 --check found
a difference (one line per file); 3 no Go toolchain; 4 a module cannot be read or kustomize failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from infra.localcluster.build import EXIT_BUILD_FAILED, BuildError, go_env, go_version
from infra.localcluster.parts import PARTS
from infra.program.common import yamlio
from infra.program.common.vendored import INDEX, KSERVE, KUSTOMIZATION, MANIFESTS, TRAINER, TRAINING_OPERATOR

EXIT_DIFFERENT = 1
KUSTOMIZATION_TEXT = """\
# Written by `make manifests` (infra/localcluster/manifests.py): the vendored build of the upstream
# overlay, as it is (infra/manifests/README.md). The provider's kustomize reads this directory.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - manifests.yaml
"""


@dataclass(frozen=True)
class Module:
    """A pinned upstream module: its path, the wrapper in parts/ that requires it, and what the module
    proxy says of it."""

    path: str
    part: str

    def info(self) -> dict[str, str]:
        """Version, directory, go.sum hash and tag commit of the module at the wrapper's pin."""
        done = subprocess.run(
            ["go", "mod", "download", "-json", self.path],
            cwd=PARTS[self.part].directory,
            capture_output=True,
            text=True,
            env=go_env(),
            check=False,
        )
        if done.returncode != 0:
            raise BuildError(f"manifests: cannot read {self.path}: {done.stderr.strip()}", EXIT_BUILD_FAILED)
        found = json.loads(done.stdout)
        origin = json.loads(Path(found["Info"]).read_text()).get("Origin") or {}
        return {
            "module": self.path,
            "version": found["Version"],
            "sum": found["Sum"],
            "commit": origin.get("Hash", ""),
            "repository": origin.get("URL", ""),
            "dir": found["Dir"],
        }


@dataclass(frozen=True)
class Upstream:
    """One vendored component: its directory in infra/manifests, the modules it is built from (the first
    is the component's own), how it is built, and what the program applies (a kustomize directory or a
    file, relative to the component's directory)."""

    name: str
    title: str
    modules: tuple[Module, ...]
    how: str
    build: Callable[[list[Path]], dict[str, bytes]]
    apply: str = "."


def _kustomize(directory: Path) -> bytes:
    if shutil.which("kubectl") is None:
        raise BuildError(
            "manifests: no kubectl on PATH (its kustomize builds the overlays)", EXIT_BUILD_FAILED
        )
    done = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, check=False, timeout=300
    )
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip()[-300:]
        raise BuildError(f"manifests: kubectl kustomize {directory} failed: {tail}", EXIT_BUILD_FAILED)
    return done.stdout


def _writable_copy(source: Path, target: Path) -> Path:
    """A copy of a module cache directory (read-only there) that kustomize files may be written into."""
    shutil.copytree(source, target)
    for root, dirs, files in os.walk(target):
        for name in [*dirs, *files]:
            path = Path(root) / name
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    target.chmod(target.stat().st_mode | stat.S_IWUSR)
    return target


def operator_files(dirs: list[Path]) -> dict[str, bytes]:
    (operator,) = dirs
    overlay = _kustomize(operator / "manifests" / "overlays" / "standalone")
    return {KUSTOMIZATION: KUSTOMIZATION_TEXT.encode(), "manifests.yaml": overlay}


def trainer_manifests(trainer: Path, jobset: Path, scratch: Path) -> Path:
    """A copy of Trainer v2's `manifests/` whose `third-party/jobset` holds JobSet's release manifest
    built from the JobSet module (upstream's refers to GitHub's release download); its manager overlay."""
    manifests = _writable_copy(trainer / "manifests", scratch / "trainer-manifests")
    third_party = manifests / "third-party" / "jobset"
    kustomization = yamlio.load((third_party / "kustomization.yaml").read_text())
    (third_party / "manifests.yaml").write_bytes(_kustomize(jobset / "config" / "default"))
    kustomization["resources"] = ["manifests.yaml"]
    (third_party / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return manifests / "overlays" / "manager"


def trainer_files(dirs: list[Path]) -> dict[str, bytes]:
    trainer, jobset = dirs
    with tempfile.TemporaryDirectory(prefix="trainer-") as scratch:
        overlay = _kustomize(trainer_manifests(trainer, jobset, Path(scratch)))
    return {KUSTOMIZATION: KUSTOMIZATION_TEXT.encode(), "manifests.yaml": overlay}


def kserve_release(kserve: Path, version: str) -> Path:
    """KServe's release manifest as committed with its tag (what the release publishes as kserve.yaml)."""
    return kserve / "install" / version / "kserve.yaml"


def kserve_files(dirs: list[Path], version: str) -> dict[str, bytes]:
    (kserve,) = dirs
    return {"kserve.yaml": kserve_release(kserve, version).read_bytes()}


OPERATOR_MODULE = Module("github.com/kubeflow/training-operator", "training-operator")
TRAINER_MODULE = Module("github.com/kubeflow/trainer/v2", "trainer")
JOBSET_MODULE = Module("sigs.k8s.io/jobset", "jobset")
KSERVE_MODULE = Module("github.com/kserve/kserve", "kserve")


def upstreams() -> tuple[Upstream, ...]:
    kserve_version = KSERVE_MODULE.info()["version"]
    return (
        Upstream(
            TRAINING_OPERATOR,
            "Kubeflow training operator",
            (OPERATOR_MODULE,),
            "kubectl kustomize manifests/overlays/standalone",
            operator_files,
        ),
        Upstream(
            TRAINER,
            "Kubeflow Trainer",
            (TRAINER_MODULE, JOBSET_MODULE),
            "kubectl kustomize manifests/overlays/manager, third-party/jobset from "
            "kubectl kustomize config/default of the JobSet module (its release manifest)",
            trainer_files,
        ),
        Upstream(
            KSERVE,
            "KServe",
            (KSERVE_MODULE,),
            f"install/{kserve_version}/kserve.yaml of the module, as it is (the release manifest)",
            lambda dirs: kserve_files(dirs, kserve_version),
            apply="kserve.yaml",
        ),
    )


def sha256(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


def built() -> tuple[dict[str, bytes], str]:
    """Every vendored file (path under infra/manifests -> content) as the pinned modules build it, and
    the index naming their sources and sums."""
    files: dict[str, bytes] = {}
    index: dict[str, object] = {}
    for upstream in upstreams():
        infos = [m.info() for m in upstream.modules]
        component = {
            f"{upstream.name}/{p}": c for p, c in upstream.build([Path(i["dir"]) for i in infos]).items()
        }
        files.update(component)
        index[upstream.name] = {
            "title": upstream.title,
            "version": infos[0]["version"],
            "apply": f"{upstream.name}/{upstream.apply}".removesuffix("/."),
            "built": upstream.how,
            "modules": [{k: v for k, v in i.items() if k != "dir"} for i in infos],
            "sha256": {path: sha256(content) for path, content in sorted(component.items())},
        }
    header = (
        "# Written by `make manifests` (infra/localcluster/manifests.py); do not edit. Each platform\n"
        "# component's vendored manifests: the pinned module(s) they are built from (version, go.sum hash,\n"
        "# the tag's commit) and each file's sha256, which the program checks before applying it.\n"
    )
    return files, header + yaml.safe_dump(index, sort_keys=False, width=110)


def differences(files: dict[str, bytes], index: str) -> list[str]:
    """One line per vendored file that is not what the modules build (missing, different or extra)."""
    wanted = {**files, INDEX: index.encode()}
    lines = []
    for path, content in sorted(wanted.items()):
        vendored = MANIFESTS / path
        if not vendored.is_file():
            lines.append(f"{path}: missing (the modules build it)")
        elif vendored.read_bytes() != content:
            lines.append(
                f"{path}: sha256 {sha256(vendored.read_bytes())}, the modules build {sha256(content)}"
            )
    extra = {
        str(p.relative_to(MANIFESTS)) for p in MANIFESTS.rglob("*") if p.is_file() and p.name != "README.md"
    } - set(wanted)
    lines += [f"{path}: not built from any module (remove it)" for path in sorted(extra)]
    return lines


def write(files: dict[str, bytes], index: str) -> None:
    """Write the vendored files and the index, removing any other file but the README."""
    wanted = {**files, INDEX: index.encode()}
    for stale in MANIFESTS.rglob("*"):
        if stale.is_file() and stale.name != "README.md" and str(stale.relative_to(MANIFESTS)) not in wanted:
            stale.unlink()
    for relative, content in wanted.items():
        (MANIFESTS / relative).parent.mkdir(parents=True, exist_ok=True)
        (MANIFESTS / relative).write_bytes(content)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.localcluster.manifests", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the vendored files with the modules' build; write nothing",
    )
    args = parser.parse_args(argv)
    try:
        go_version()
        files, index = built()
    except BuildError as error:
        print(error, file=sys.stderr)
        return error.code
    if args.check:
        found = differences(files, index)
        for line in found:
            print(f"manifests: {line}", file=sys.stderr)
        if found:
            return EXIT_DIFFERENT
        print(f"manifests: {len(files)} vendored files are what the pinned modules build")
        return 0
    write(files, index)
    print(f"manifests: wrote {len(files)} files and {INDEX} under {MANIFESTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
