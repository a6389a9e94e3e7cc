"""Build the local cluster tier's real parts from their pinned wrapper modules (`make cluster-build`).

    python -m infra.localcluster.build [--part NAME ...]

Each part builds with `GOTOOLCHAIN=local CGO_ENABLED=0 -trimpath` into
`$DDP_MNIST_CACHE/realcluster/bin/<part>-<key>/` (default `~/.cache/ddp-mnist`), where the key covers the
wrapper's files, the part's build settings and the Go version: an unchanged pin is never rebuilt. One line
per part says what happened and how long it took. Go's own caches (`GOMODCACHE`, `GOCACHE`) are kept.

Exit codes: 0 every part is built; 2 bad arguments; 3 no Go toolchain; 4 a part failed to build (its
last lines of output follow).
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from infra.localcluster.parts import PARTS, PROVIDER_MAIN, Part, tier_parts
from infra.stackconfig import cache_home

EXIT_NO_GO = 3
EXIT_BUILD_FAILED = 4


class BuildError(Exception):
    """A part could not be built; `code` is the exit code that says why."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def cache_root() -> Path:
    return cache_home() / "realcluster"


def go_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=readonly"})
    return env


def go_version() -> str:
    if shutil.which("go") is None:
        raise BuildError(
            "build: no Go toolchain on PATH: the local cluster builds etcd, Kubernetes, KWOK, the operators "
            "and the Pulumi engine from Go modules; install Go 1.26 or newer",
            EXIT_NO_GO,
        )
    result = subprocess.run(
        ["go", "env", "GOVERSION"], capture_output=True, text=True, env=go_env(), check=False
    )
    if result.returncode != 0:
        raise BuildError(f"build: `go env GOVERSION` failed: {result.stderr.strip()}", EXIT_NO_GO)
    return result.stdout.strip()


def part_key(part: Part, go: str) -> str:
    """A digest of everything that decides the part's binaries."""
    digest = hashlib.sha256()
    for path in sorted(p for p in part.directory.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(part.directory)).encode() + b"\0" + path.read_bytes() + b"\0")
    spec = {
        "binaries": part.binaries,
        "tags": part.tags,
        "ldflags": part.ldflags,
        "companions": part.companions,
        # What the part writes into its copy (the generator's code and the text it embeds).
        "generated": inspect.getsource(part.generated) + PROVIDER_MAIN if part.generated else None,
        "go": go,
    }
    digest.update(json.dumps(spec, sort_keys=True).encode())
    return digest.hexdigest()[:16]


def part_dir(part: Part, go: str) -> Path:
    return cache_root() / "bin" / f"{part.name}-{part_key(part, go)}"


def module_dir(work: Path, module: str) -> Path:
    """The module cache directory of `module` at the version the wrapper requires."""
    result = subprocess.run(
        ["go", "list", "-m", "-json", module],
        cwd=work,
        capture_output=True,
        text=True,
        env=go_env(),
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(f"build: cannot locate {module}: {result.stderr.strip()}", EXIT_BUILD_FAILED)
    info = json.loads(result.stdout)
    if not info.get("Dir"):
        subprocess.run(["go", "mod", "download", module], cwd=work, env=go_env(), check=True)
        return module_dir(work, module)
    return Path(info["Dir"])


def _run_go(part: Part, args: list[str], work: Path) -> None:
    result = subprocess.run(
        ["go", *args], cwd=work, capture_output=True, text=True, env=go_env(), check=False
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-20:])
        raise BuildError(f"build: {part.name}: `go {' '.join(args[:2])}` failed:\n{tail}", EXIT_BUILD_FAILED)


def build_part(part: Part, go: str) -> tuple[Path, float | None]:
    """The part's binary directory, and the seconds its build took (None: it was already built)."""
    target = part_dir(part, go)
    if target.is_dir():
        return target, None
    started = time.monotonic()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"{part.name}-", dir=target.parent) as scratch:
        work = Path(scratch) / "src"
        shutil.copytree(part.directory, work)
        if part.generated is not None:
            for relative, content in part.generated(lambda module: module_dir(work, module)).items():
                (work / relative).parent.mkdir(parents=True, exist_ok=True)
                (work / relative).write_bytes(content)
        out = Path(scratch) / "bin"
        out.mkdir()
        for name, package in part.binaries.items():
            args = ["build", "-trimpath", "-o", str(out / name)]
            if part.tags:
                args += ["-tags", part.tags]
            if part.ldflags:
                args += ["-ldflags", " ".join(part.ldflags)]
            _run_go(part, [*args, package], work)
        for module, path, name in part.companions:
            shutil.copy2(module_dir(work, module) / path, out / name)
            (out / name).chmod(0o755)
        try:
            out.rename(target)  # atomic: a directory that exists is a whole build
        except OSError:
            if not target.is_dir():
                raise
            # Another build of the same key finished first: its binaries are these, keep them.
    return target, time.monotonic() - started


def binary(name: str) -> Path:
    """The path of a built binary (built now if its part is not yet)."""
    go = go_version()
    for part in PARTS.values():
        if name in part.binaries or any(c[2] == name for c in part.companions):
            return build_part(part, go)[0] / name
    raise KeyError(name)


def build(names: list[str]) -> dict[str, Path]:
    go = go_version()
    built = {}
    for name in names:
        part = PARTS[name]
        directory, seconds = build_part(part, go)
        what = ", ".join([*part.binaries, *(c[2] for c in part.companions)])
        if seconds is None:
            print(f"build: {name}: up to date ({what}) in {directory}", flush=True)
        else:
            print(f"build: {name}: built {what} in {seconds:.0f} s", flush=True)
        built[name] = directory
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part", action="append", choices=sorted(PARTS), help="build only this part (repeatable)"
    )
    parser.add_argument(
        "--node", action="store_true", help="also the real node's parts (kubelet, kube-proxy)"
    )
    args = parser.parse_args(argv)
    try:
        build(args.part or tier_parts("cluster", *(["node"] if args.node else [])))
    except BuildError as error:
        print(error, file=sys.stderr)
        return error.code
    return 0


if __name__ == "__main__":
    sys.exit(main())
