"""Offline render: `python -m infra.review.render --stack NAME [--out DIR] [--validate]`.

Runs the real Pulumi program with the stack's config under Pulumi's mock runtime, writes every
Kubernetes object it would create as deterministic YAML (`<stack>.yaml`), and the pods and Services
the controllers then create from them (`<stack>.effective.yaml`, see `infra.review.cluster`), and
prints a preview-like table. `--validate` checks the objects against the upstream schemas and the
effective pods against the namespace's admission (Pod Security, LimitRange, ResourceQuota).

Exit codes: `EXIT_CODE_MEANINGS` below (`--help` and docs/reference/exit-codes.md list it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from infra.epilog import exit_codes_epilog
from infra.review.cluster import cluster_view, effective_yaml
from infra.review.manifest import Rendering, render, to_yaml
from infra.review.summary import summary
from infra.stackconfig import ROOT, StackNotFound, load_stack

EXIT_CONFIG = 2
EXIT_INVALID = 3
# Every exit code of the command and its meaning: `--help` lists them, and docs/reference/exit-codes.md
# is generated from them (python -m infra.reference).
EXIT_CODE_MEANINGS = {
    0: "rendered (with --validate: every checked object valid and every effective pod admitted)",
    EXIT_CONFIG: "bad flags, bad stack config, unknown or unreadable stack, a vendored manifest that is not "
    "the one infra/manifests/index.yaml records, a missing `--crd` file, a `--crd-dir` without the Trainer "
    "v2 and JobSet CRDs, or an unwritable `--out` (nothing written)",
    EXIT_INVALID: "a rendered object failed schema validation, or an effective pod would be refused by the "
    "API server (one line each; nothing written)",
}
DEFAULT_CRD = ROOT.parent / "shared" / "k8s" / "crds" / "kubeflow.org_pytorchjobs.yaml"
DEFAULT_CRD_DIR = DEFAULT_CRD.parent
# Kubeflow Trainer v2.3.0's CRDs (manifests/base/crds) and JobSet v0.12.0's, by the kind they define.
TRAINER_CRDS = {
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "TrainingRuntime": "trainer.kubeflow.org_trainingruntimes.yaml",
    "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml",
}
JOBSET_CRD = "jobset.x-k8s.io_jobsets.yaml"
TRAINER_GROUP = "trainer.kubeflow.org/"
# Kueue's LocalQueue CRD (v1beta1 and v1beta2): each LocalQueue is checked at its own apiVersion.
LOCAL_QUEUE_CRD = DEFAULT_CRD_DIR / "kueue.x-k8s.io_localqueues.yaml"
KUEUE_GROUP = "kueue.x-k8s.io/"


def is_local_queue(obj: dict[str, Any]) -> bool:
    return obj["kind"] == "LocalQueue" and obj["apiVersion"].startswith(KUEUE_GROUP)


def local_queue_errors(obj: dict[str, Any]) -> list[str]:
    """A LocalQueue against Kueue's CRD at the object's version (strict: unknown fields are errors)."""
    from infra.review.crd import crd_validator

    version = obj["apiVersion"].removeprefix(KUEUE_GROUP)
    where = f"{obj['kind']}/{obj['metadata']['name']}"
    try:
        validator = crd_validator(LOCAL_QUEUE_CRD, version, strict=True)
    except StopIteration:
        return [f"{where}: apiVersion {obj['apiVersion']} is not served by Kueue's LocalQueue CRD"]
    return [f"{where}: {e.message} at {e.json_path}" for e in validator.iter_errors(obj)]


# KServe v0.20.0's InferenceService CRD (config/crd/full), served version v1beta1.
KSERVE_CRD = "serving.kserve.io_inferenceservices.yaml"
KSERVE_GROUP = "serving.kserve.io/"


def is_builtin(obj: dict[str, Any]) -> bool:
    """Kinds the Kubernetes API server itself serves (kubernetes-validate has their schemas)."""
    group = obj["apiVersion"].rpartition("/")[0]
    return "." not in group or group.endswith(".k8s.io")


def trainer_crds_present(crd_dir: Path | None) -> bool:
    return crd_dir is not None and all((crd_dir / f).is_file() for f in (*TRAINER_CRDS.values(), JOBSET_CRD))


def kserve_crd_present(crd_dir: Path | None) -> bool:
    return crd_dir is not None and (crd_dir / KSERVE_CRD).is_file()


def kserve_errors(obj: dict[str, Any], crd_dir: Path) -> list[str]:
    """An InferenceService against KServe's CRD, version v1beta1 (strict: unknown fields are errors)."""
    from infra.review.crd import crd_validator

    where = f"{obj['kind']}/{obj['metadata']['name']}"
    validator = crd_validator(crd_dir / KSERVE_CRD, "v1beta1", strict=True)
    return [f"{where}: {e.message} at {e.json_path}" for e in validator.iter_errors(obj)]


def trainer_errors(obj: dict[str, Any], crd_dir: Path) -> list[str]:
    """A Trainer v2 object against its CRD (strict: unknown fields are errors), and a runtime's JobSet
    template against JobSet's own spec schema."""
    from infra.review.crd import crd_validator

    where = f"{obj['kind']}/{obj['metadata']['name']}"
    checks = [(crd_validator(crd_dir / TRAINER_CRDS[obj["kind"]], None, strict=True), obj, "")]
    if obj["kind"] != "TrainJob":
        jobset = crd_validator(crd_dir / JOBSET_CRD, None, strict=True, at=("spec",))
        checks.append((jobset, obj.get("spec", {}).get("template", {}).get("spec", {}), " (JobSet spec)"))
    return [
        f"{where}{what}: {e.message} at {e.json_path}"
        for validator, document, what in checks
        for e in validator.iter_errors(document)
    ]


def validation_errors(
    rendering: Rendering, version: str, crd: Path | None, crd_dir: Path | None = None
) -> list[str]:
    """Strict upstream-schema errors of built-in objects, CRD-schema errors of PyTorchJobs and (with
    `crd_dir` holding their CRDs) of Trainer v2's objects, and of Kueue's LocalQueue when its CRD is
    in ../shared. Other custom resources have no schema here and are listed by `unchecked_kinds`."""
    import kubernetes_validate

    from infra.review.crd import crd_validator

    errors = []
    validator = crd_validator(crd) if crd else None
    trainer = trainer_crds_present(crd_dir)
    for obj in rendering.objects:
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"].startswith(TRAINER_GROUP) and obj["kind"] in TRAINER_CRDS:
            if trainer and crd_dir is not None:
                errors += trainer_errors(obj, crd_dir)
            continue
        if is_local_queue(obj) and LOCAL_QUEUE_CRD.is_file():
            errors += local_queue_errors(obj)
        if obj["apiVersion"].startswith(KSERVE_GROUP) and obj["kind"] == "InferenceService":
            if kserve_crd_present(crd_dir) and crd_dir is not None:
                errors += kserve_errors(obj, crd_dir)
            continue
        if obj["apiVersion"].startswith("kubeflow.org/"):
            if validator is not None:
                errors += [f"{where}: {e.message} at {e.json_path}" for e in validator.iter_errors(obj)]
            continue
        if not is_builtin(obj):
            continue
        try:
            kubernetes_validate.validate(obj, f"{version}.0", strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{where}: {exc.message} at {'.'.join(map(str, exc.path))}")
    return errors


def unchecked_kinds(rendering: Rendering) -> list[str]:
    return sorted(
        {
            o["kind"]
            for o in rendering.objects
            if not is_builtin(o)
            and not o["apiVersion"].startswith("kubeflow.org/")
            and not (o["apiVersion"].startswith(TRAINER_GROUP) and o["kind"] in TRAINER_CRDS)
            and not (is_local_queue(o) and LOCAL_QUEUE_CRD.is_file())
            and not (o["apiVersion"].startswith(KSERVE_GROUP) and o["kind"] == "InferenceService")
        }
    )


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename; the file's mode honours the umask, as `open` would."""
    path.parent.mkdir(parents=True, exist_ok=True)
    umask = os.umask(0)
    os.umask(umask)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
        tmp.flush()
        os.fsync(tmp.fileno())
        os.fchmod(tmp.fileno(), 0o666 & ~umask)
    os.replace(tmp.name, path)


def main(argv: list[str] | None = None) -> int:
    """The command line: its flags, then each step (load, render, validate, write) with its exit code, in
    order."""
    from infra.program.checks import ConfigError
    from infra.program.common.platform_facts import PlatformMismatch
    from infra.program.common.vendored import ManifestMismatch

    parser = argparse.ArgumentParser(
        prog="python -m infra.review.render",
        description=__doc__.split("\n\n")[0],
        epilog=exit_codes_epilog(EXIT_CODE_MEANINGS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", required=True, help="stack name: stacks/Pulumi.<stack>.yaml")
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "build" / "rendered",
        help="directory for <stack>.yaml and <stack>.effective.yaml (default: build/rendered)",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="check built-in objects with kubernetes-validate --strict for the stack's "
        "kubernetesVersion, PyTorchJobs and Trainer v2's objects against their CRD schemas, and the "
        "effective pods against the namespace's admission (Pod Security, LimitRange, ResourceQuota)",
    )
    parser.add_argument(
        "--crd",
        type=Path,
        default=DEFAULT_CRD,
        help="PyTorchJob CRD file for --validate (default: ../shared/k8s/crds/...)",
    )
    parser.add_argument(
        "--crd-dir",
        type=Path,
        default=DEFAULT_CRD_DIR,
        help="directory with Kubeflow Trainer v2's and JobSet's CRD files for --validate "
        "(default: ../shared/k8s/crds)",
    )
    args = parser.parse_args(argv)
    try:
        rendering = render(load_stack(args.stack))
    except (ConfigError, PlatformMismatch, StackNotFound, ManifestMismatch) as exc:
        print(f"render: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    view = cluster_view(rendering.objects, rendering.settings)
    print(summary(rendering, view))
    if args.validate:
        if args.crd != DEFAULT_CRD and not args.crd.is_file():
            print(f"render: --crd {args.crd}: no such file", file=sys.stderr)
            return EXIT_CONFIG
        version = rendering.settings.kubernetes_version
        crd = args.crd if args.crd.is_file() else None
        if args.crd_dir != DEFAULT_CRD_DIR and not trainer_crds_present(args.crd_dir):
            print(f"render: --crd-dir {args.crd_dir}: no Trainer v2 and JobSet CRD files", file=sys.stderr)
            return EXIT_CONFIG
        crd_dir = args.crd_dir if trainer_crds_present(args.crd_dir) else None
        errors = [f"invalid {e}" for e in validation_errors(rendering, version, crd, crd_dir)]
        errors += [f"refused {line}" for line in view.admission.refusals]
        if errors:
            print("\n".join(f"render: {e}" for e in errors), file=sys.stderr)
            return EXIT_INVALID
        checked = [f"built-in objects against Kubernetes {version} (strict)"]
        if any(o["kind"] == "PyTorchJob" for o in rendering.objects):
            checked.append(
                "PyTorchJob: CRD schema" if crd else "PyTorchJob: not checked (no CRD file, see --crd)"
            )
        trainer_kinds = sorted(
            {o["kind"] for o in rendering.objects if o["apiVersion"].startswith(TRAINER_GROUP)}
        )
        if trainer_kinds:
            checked.append(
                f"{', '.join(trainer_kinds)}: CRD schemas (strict), the runtime's JobSet template: JobSet's"
                if crd_dir
                else f"{', '.join(trainer_kinds)}: not checked (no CRD files, see --crd-dir)"
            )
        if LOCAL_QUEUE_CRD.is_file() and any(is_local_queue(o) for o in rendering.objects):
            checked.append("LocalQueue: Kueue's CRD schema (strict)")
        if any(o["kind"] == "InferenceService" for o in rendering.objects):
            checked.append(
                "InferenceService: CRD schema (strict)"
                if kserve_crd_present(crd_dir)
                else "InferenceService: not checked (no CRD file, see --crd-dir)"
            )
        checked += [f"{kind}: not checked (no schema here)" for kind in unchecked_kinds(rendering)]
        checked.append(
            f"{len(view.admission.pods)} effective pods admitted under Pod Security "
            f"{', '.join(sorted({repr(n.level) for n in view.namespaces.values()}))}, LimitRange and "
            "ResourceQuota"
        )
        print(f"validated: {'; '.join(checked)}")
    written = []
    for path, text in (
        (args.out / f"{args.stack}.yaml", to_yaml(rendering)),
        (args.out / f"{args.stack}.effective.yaml", effective_yaml(view, args.stack)),
    ):
        try:
            write_atomic(path, text)
        except OSError as exc:
            print(f"render: cannot write {path}: {exc.strerror}", file=sys.stderr)
            return EXIT_CONFIG
        written.append(str(path))
    print(
        f"wrote {len(rendering.objects)} objects to {written[0]}; the {len(view.effective.pods)} pods and "
        f"{len(view.effective.services)} Services the controllers create to {written[1]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
