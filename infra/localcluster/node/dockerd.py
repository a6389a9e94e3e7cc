"""The build side of the node's images: a docker daemon of the node's own (build only, against the node's
containerd), and the loads of its images into containerd (`docker save | ctr images import`, as `kind
load docker-image` does), with the pruning of earlier builds."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DOCKER = "/usr/bin/docker"  # Debian's client, the daemon's version


NAMESPACE = "k8s.io"  # containerd's namespace for the CRI's images


class ImageError(Exception):
    """An image could not be made or loaded; the message is one line for the user."""


def checked_run(argv: list[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-3:])
        raise ImageError(f"images: {what} failed: {tail}")
    return result


@dataclass(frozen=True)
class Docker:
    """A docker daemon of the node's (build only): its socket, data in the cache."""

    socket: Path

    def __call__(self, *args: str, what: str, stdin: int | None = None) -> str:
        env = {**os.environ, "DOCKER_HOST": f"unix://{self.socket}", "DOCKER_BUILDKIT": "0"}
        return checked_run([DOCKER, *args], what, env=env, stdin=stdin).stdout

    def has(self, ref: str) -> bool:
        try:
            self("image", "inspect", ref, what=f"inspect {ref}")
        except ImageError:
            return False
        return True


@contextlib.contextmanager
def docker_daemon(data_root: Path, run_dir: Path, containerd_socket: Path) -> Iterator[Docker]:
    """dockerd against the node's containerd, no networking of its own (builds use the host's network
    for pip), stopped when the block ends."""
    run_dir.mkdir(parents=True, exist_ok=True)
    data_root.mkdir(parents=True, exist_ok=True)
    socket = run_dir / "docker.sock"
    log = (run_dir / "dockerd.log").open("ab")
    process = subprocess.Popen(
        [
            "/usr/sbin/dockerd",
            f"--data-root={data_root}",
            f"--exec-root={run_dir / 'exec'}",
            f"--pidfile={run_dir / 'dockerd.pid'}",
            f"--host=unix://{socket}",
            f"--containerd={containerd_socket}",
            "--iptables=false",
            "--ip-forward=false",
            "--ip-masq=false",
            "--bridge=none",
            "--storage-driver=overlay2",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    docker = Docker(socket)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise ImageError(f"images: dockerd exited at start (see {run_dir / 'dockerd.log'})")
            with contextlib.suppress(ImageError):
                docker("version", what="docker version")
                break
            if time.monotonic() > deadline:
                raise ImageError(f"images: dockerd not ready in 60 s (see {run_dir / 'dockerd.log'})")
            time.sleep(0.5)
        yield docker
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def ctr(containerd_socket: Path, *args: str, stdin: int | None = None) -> str:
    return checked_run(
        ["ctr", "--address", str(containerd_socket), "--namespace", NAMESPACE, *args],
        f"ctr {' '.join(args[:2])}",
        stdin=stdin,
    ).stdout


def loaded(containerd_socket: Path) -> set[str]:
    return set(ctr(containerd_socket, "images", "list", "--quiet").split())


def load(docker: Docker, containerd_socket: Path, ref: str) -> str:
    """`docker save | ctr images import` unless containerd has `ref`; the image's digest reference."""
    if ref not in loaded(containerd_socket):
        save = subprocess.Popen(
            [DOCKER, "save", ref],
            stdout=subprocess.PIPE,
            env={**os.environ, "DOCKER_HOST": f"unix://{docker.socket}"},
        )
        assert save.stdout is not None
        try:
            ctr(containerd_socket, "images", "import", "-", stdin=save.stdout.fileno())
        finally:
            save.stdout.close()
            save.wait()
    for line in ctr(containerd_socket, "images", "list").splitlines()[1:]:
        words = line.split()
        if words and words[0] == ref:
            by_digest = f"{ref.rsplit(':', 1)[0]}@{words[2]}"
            # The CRI finds an image by a reference only if an image record has that name (a pull
            # records both `repo:tag` and `repo@digest`; an import only the tag).
            if by_digest not in loaded(containerd_socket):
                ctr(containerd_socket, "images", "tag", ref, by_digest)
            return by_digest
    raise ImageError(f"images: {ref} is not in containerd after its import")


def repository(ref: str) -> str:
    """`repo` of `repo:tag` or `repo@sha256:...`."""
    name = ref.split("@", 1)[0]
    return name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name


def prune(docker: Docker, containerd_socket: Path, kept: set[str]) -> None:
    """Remove the earlier builds of the images this module tags (any other reference to a repository
    of `kept`'s), from docker and from containerd, so the cache holds one build of each."""
    ours = {repository(ref) for ref in kept}
    listed = docker("images", "--format", "{{.Repository}}:{{.Tag}}", what="docker images").split()
    stale = [ref for ref in listed if repository(ref) in ours and ref not in kept]
    if stale:
        docker("rmi", *stale, what="docker rmi of earlier builds")
    for ref in loaded(containerd_socket):
        if repository(ref) in ours and ref not in kept:
            ctr(containerd_socket, "images", "rm", ref)
