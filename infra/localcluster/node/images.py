"""Images for the real node, made on this machine and loaded into its containerd, as `kind load
docker-image` would: no pod pulls anything (their pull policy is IfNotPresent and the image is there).

- **pause**: the pod sandbox's process, a static C program that waits for a signal and reaps children
  (what upstream's `build/pause/linux/pause.c` does), as a one-file image.
- **trainer base**: Debian bookworm (debootstrap from the machine's configured mirror) with Python and
  torch at the project's pin from PyPI in `/opt/venv`, in place of the Dockerfile's upstream base
  (pytorch/pytorch, whose registry is not reachable here). Its CA bundle is this machine's plus the
  tier's mirror CA (mirror.py), as an organisation's base image carries its own CA.
- **tools**: Debian bookworm's minimal system (sh, coreutils, getent) with busybox (`busybox nc`, as
  alpine's busybox has it), run as root: the training operator's init container
  (`operatorInitContainerImage`, which waits with `getent` for the master's name), the platform's smoke
  checks (the NetworkPolicy check's pods talk through `busybox nc`) and the volume provisioner's helper
  pods (mkdir and rm of a volume's directory).
- **trainer**: **our Dockerfile**, built by docker with only `BASE_IMAGE` set to that base: every step
  above the base is the one users build.

docker (Debian's docker.io) runs only to build: its daemon uses the node's containerd and keeps its
images in the cache (`$DDP_MNIST_CACHE/realcluster/node/docker`), so a second run builds nothing. Each
image is tagged by a key of what decides it (its inputs' bytes), and a key already in containerd is
never loaded again.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from infra.localcluster.node.config import PAUSE_IMAGE
from infra.localcluster.node.dockerd import Docker, ImageError, checked_run, docker_daemon, load, prune

ROOT = Path(__file__).resolve().parents[3]
BASE_REPO = "ddp-mnist.local/trainer-base"
TRAINER_REPO = "ddp-mnist.local/trainer"
TOOLS_REPO = "ddp-mnist.local/tools"
# The NetworkPolicy check talks through `busybox nc` (infra/program/platform/network_check.py).
TOOLS_PACKAGES = ("busybox-static",)
BASE_RECIPE = "3"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
VENV = "/opt/venv"
PATH_ENV = f"{VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PAUSE_C = r"""
/* The pod sandbox's process: it holds the pod's namespaces, reaps what is re-parented to it, and
   exits on SIGINT or SIGTERM (what upstream's build/pause/linux/pause.c does). */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop}, on_child = {.sa_handler = reap,
                                                                .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &on_stop, NULL);
    sigaction(SIGTERM, &on_stop, NULL);
    sigaction(SIGCHLD, &on_child, NULL);
    for (;;) pause();
}
"""


def digest_of(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


def tree_bytes(root: Path, ignored: Callable[[Path], bool] = lambda p: False) -> bytes:
    """The names and contents of every file under `root` (a key's input)."""
    chunks = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not ignored(p)):
        chunks.append(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return b"\0".join(chunks)


def _pycache(path: Path) -> bool:
    return "__pycache__" in path.parts or path.suffix == ".pyc"


def base_key(extra_ca: bytes) -> str:
    """What decides the base: its recipe (suite, packages, the venv, how its layer is made), the torch
    and numpy pins and the CA it adds. Change BASE_RECIPE when `_base_rootfs` changes what it makes."""
    recipe = [BASE_RECIPE, SUITE, *BASE_PACKAGES, VENV, PATH_ENV, *_pins()]
    return digest_of(" ".join(recipe).encode(), extra_ca)


def trainer_key(base_ref: str) -> str:
    """What decides the trainer image: its base, the Dockerfile, .dockerignore and trainer/."""
    return digest_of(
        base_ref.encode(),
        (ROOT / "Dockerfile").read_bytes(),
        (ROOT / ".dockerignore").read_bytes(),
        tree_bytes(ROOT / "trainer", _pycache),
    )


def _apt_mirror() -> str:
    """The Debian mirror this machine's apt uses (debootstrap fetches from the same one)."""
    for source in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if not source.is_file():
            continue
        for line in source.read_text().splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] or words[:1] == ["deb"]:
                for word in words[1:]:
                    if word.startswith("http") and "security" not in word:
                        return word
    raise ImageError("images: no Debian mirror in /etc/apt/sources.list(.d): debootstrap needs one")


def _pins() -> list[str]:
    """torch at pyproject.toml's pin (constraints.txt leaves torch and its platform wheels to it) and
    numpy at constraints.txt's: the versions the project's tests run with."""
    torch = re.search(r'"(torch==[^"]+)"', (ROOT / "pyproject.toml").read_text())
    numpy = re.search(r"^(numpy==\S+)", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    if torch is None or numpy is None:
        raise ImageError("images: no torch pin in pyproject.toml or no numpy pin in constraints.txt")
    return [torch.group(1), numpy.group(1)]


def _debootstrap(rootfs: Path, packages: tuple[str, ...], say: Callable[[str], None]) -> None:
    say(f"images: debootstrap {SUITE} (minbase{''.join(', ' + p for p in packages)})")
    include = [f"--include={','.join(packages)}"] if packages else []
    checked_run(
        ["debootstrap", "--variant=minbase", *include, SUITE, str(rootfs), _apt_mirror()],
        "debootstrap",
    )


def _base_rootfs(rootfs: Path, pip_cache: Path, extra_ca: bytes, say: Callable[[str], None]) -> None:
    """Debian with Python, and torch and numpy at our pins in /opt/venv. pip's cache is kept beside the
    images (`pip_cache`, on the same filesystem) and moved into the chroot for the install and back, so
    nothing is mounted and nothing of the cache is deleted with the chroot."""
    _debootstrap(rootfs, BASE_PACKAGES, say)
    checked_run(["chroot", str(rootfs), "python3", "-m", "venv", VENV], "python3 -m venv in the base")
    shutil.copy2("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")
    # The base trusts what this machine trusts (a proxy's CA too), for its pip and the Dockerfile's.
    bundle = rootfs / HOST_CA_BUNDLE.relative_to("/")
    if HOST_CA_BUNDLE.is_file():
        shutil.copy2(HOST_CA_BUNDLE, bundle)
    with bundle.open("ab") as trusted:
        trusted.write(b"\n" + extra_ca)
    cache = rootfs / "root" / ".cache" / "pip"
    cache.parent.mkdir(parents=True, exist_ok=True)
    pip_cache.mkdir(parents=True, exist_ok=True)
    pip_cache.rename(cache)
    try:
        pins = _pins()
        say(f"images: pip install {' '.join(pins)} into the base")
        checked_run(
            ["chroot", str(rootfs), f"{VENV}/bin/pip", "install", "-q", "--no-compile", *pins],
            "pip install torch in the base",
            env={
                **os.environ,
                "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                "HOME": "/root",
                "PIP_CACHE_DIR": "/root/.cache/pip",
                "PIP_CERT": str(HOST_CA_BUNDLE),
            },
        )
    finally:
        cache.rename(pip_cache)
    (rootfs / "etc" / "resolv.conf").write_text("")
    shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)


def _import_rootfs(docker: Docker, rootfs: Path, ref: str, changes: list[str]) -> None:
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    args = ["import", *(arg for change in changes for arg in ("--change", change)), "-", ref]
    try:
        docker(*args, what=f"docker import {ref}", stdin=tar.stdout.fileno())
    finally:
        tar.stdout.close()
        tar.wait()


def pause_image(docker: Docker, scratch: Path) -> str:
    """The pause image (PAUSE_IMAGE), built unless docker has it."""
    if docker.has(PAUSE_IMAGE):
        return PAUSE_IMAGE
    rootfs = scratch / "pause"
    rootfs.mkdir(parents=True)
    (scratch / "pause.c").write_text(PAUSE_C)
    checked_run(
        ["gcc", "-static", "-Os", "-o", str(rootfs / "pause"), str(scratch / "pause.c")], "gcc pause.c"
    )
    _import_rootfs(docker, rootfs, PAUSE_IMAGE, ['ENTRYPOINT ["/pause"]', "USER 65535:65535"])
    return PAUSE_IMAGE


def binary_image(docker: Docker, scratch: Path, repo: str, program: Path) -> str:
    """A one-file image of a static program (`/<name>`, its entrypoint), tagged by the program's digest,
    run as an unprivileged user unless the pod says otherwise."""
    ref = f"{repo}:{digest_of(program.read_bytes())}"
    if docker.has(ref):
        return ref
    rootfs = scratch / program.name
    rootfs.mkdir(parents=True)
    shutil.copy2(program, rootfs / program.name)
    _import_rootfs(docker, rootfs, ref, [f'ENTRYPOINT ["/{program.name}"]', "USER 65532:65532"])
    return ref


def tools_image(docker: Docker, scratch: Path, say: Callable[[str], None]) -> str:
    """Debian's minimal system with busybox as an image, its default user root (TOOLS_REPO, tagged by its
    recipe)."""
    ref = f"{TOOLS_REPO}:{digest_of(SUITE.encode(), b'minbase', *(p.encode() for p in TOOLS_PACKAGES))}"
    if docker.has(ref):
        return ref
    rootfs = scratch / "tools"
    try:
        _debootstrap(rootfs, TOOLS_PACKAGES, say)
        shutil.rmtree(rootfs / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        _import_rootfs(docker, rootfs, ref, ['CMD ["sh"]'])
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    return ref


def base_image(docker: Docker, scratch: Path, extra_ca: bytes, say: Callable[[str], None]) -> str:
    ref = f"{BASE_REPO}:{base_key(extra_ca)}"
    if docker.has(ref):
        return ref
    started = time.monotonic()
    rootfs = scratch / "base"
    try:
        _base_rootfs(rootfs, scratch.parent / "pip", extra_ca, say)
        changes = [f"ENV PATH={PATH_ENV}", f"ENV PIP_CERT={HOST_CA_BUNDLE}", 'CMD ["python"]']
        _import_rootfs(docker, rootfs, ref, changes)
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
    say(f"images: built {ref} in {time.monotonic() - started:.0f} s")
    return ref


def trainer_image(docker: Docker, base_ref: str, say: Callable[[str], None]) -> str:
    """Our Dockerfile, built on `base_ref` (its only build argument here)."""
    ref = f"{TRAINER_REPO}:{trainer_key(base_ref)}"
    if docker.has(ref):
        return ref
    started = time.monotonic()
    say(f"images: docker build of the Dockerfile on {base_ref}")
    docker(
        "build",
        "--network=host",
        "--build-arg",
        f"BASE_IMAGE={base_ref}",
        "--build-arg",
        "SOURCE_COMMIT=local",
        "-t",
        ref,
        "-f",
        str(ROOT / "Dockerfile"),
        str(ROOT),
        what="docker build of the Dockerfile",
    )
    say(f"images: built {ref} in {time.monotonic() - started:.0f} s")
    return ref


def build_all(
    data_root: Path,
    run_dir: Path,
    containerd_socket: Path,
    programs: dict[str, Path],
    extra_ca: bytes,
    say: Callable[[str], None],
) -> dict[str, str]:
    """Every image the node runs, built (unless built) and loaded: name -> digest reference. `programs`:
    static programs (CoreDNS...) each packed as a one-file image `ddp-mnist.local/<name>`; `extra_ca`:
    the CA the trainer base trusts besides this machine's."""
    refs: dict[str, str] = {}
    with (
        tempfile.TemporaryDirectory(prefix="images-", dir=data_root.parent) as scratch,
        docker_daemon(data_root, run_dir, containerd_socket) as docker,
    ):
        base = base_image(docker, Path(scratch), extra_ca, say)
        built = {
            "pause": pause_image(docker, Path(scratch)),
            **{
                name: binary_image(docker, Path(scratch), f"ddp-mnist.local/{name}", path)
                for name, path in programs.items()
            },
            "tools": tools_image(docker, Path(scratch), say),
            "trainer": trainer_image(docker, base, say),
        }
        for name, ref in built.items():
            started = time.monotonic()
            refs[name] = load(docker, containerd_socket, ref)
            say(f"images: {name} in containerd as {refs[name]} ({time.monotonic() - started:.0f} s)")
        prune(docker, containerd_socket, {*built.values(), *refs.values(), base})
    return refs
