"""MNIST's four files on disk and in buckets, without torch: their names, ``SHA256SUMS``, the layouts
``--data`` accepts, and the IDX header check.

The seed Job (:mod:`trainer.seed`) and the S3 code (:mod:`trainer.s3`) need only these, so a seed pod
never imports torch (about 1.2 s of CPU and 200 MB of memory per start: docs/BENCHMARKS.md);
:mod:`trainer.data` turns the checked bytes into tensors.

Accepted layouts for a data root (the first that holds the files wins):

* ``ROOT/MNIST/raw/<name>`` (torchvision's layout; what ``trainer.seed --to`` writes)
* ``ROOT/<name>`` (a directory that directly holds the four files)

where ``<name>`` is one of :data:`FILES`, gzipped (``.gz``) or raw. If a ``SHA256SUMS`` file
(``sha256sum`` format) sits beside the files, every file it names is verified.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.errors import DataError

TRAIN_IMAGES = "train-images-idx3-ubyte"
TRAIN_LABELS = "train-labels-idx1-ubyte"
TEST_IMAGES = "t10k-images-idx3-ubyte"
TEST_LABELS = "t10k-labels-idx1-ubyte"
FILES = (TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS)
SUMS_FILE = "SHA256SUMS"
SEED_HINT = "seed it with 'python -m trainer.seed --from DIR --to ROOT' (or --mirror URL)"
S3_SEED_HINT = "seed it with 'python -m trainer.seed --from DIR --to s3://BUCKET/PREFIX'"

_IDX_MAGIC = {3: 0x00000803, 1: 0x00000801}
_EXPECTED_COUNT = {TRAIN_IMAGES: 60000, TRAIN_LABELS: 60000, TEST_IMAGES: 10000, TEST_LABELS: 10000}


def sha256_file(path: Path) -> str:
    ahead = _read_ahead_entry(path)
    if ahead is not None:
        return ahead.sha256
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sums(path: Path) -> dict[str, str]:
    """Parse a ``sha256sum``-format file into ``{file name: hex digest}``."""
    return parse_sums(path.read_text(), str(path))


def parse_sums(text: str, where: str) -> dict[str, str]:
    """``sha256sum``-format text (from ``where``: a path or URL) as ``{file name: hex digest}``."""
    sums: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise DataError(f"{where}:{number}: not a 'sha256  name' line: {line!r}")
        sums[parts[1].lstrip("*")] = parts[0].lower()
    return sums


def format_sums(sums: dict[str, str]) -> str:
    return "".join(f"{digest}  {name}\n" for name, digest in sorted(sums.items()))


def find_file(directory: Path, name: str) -> Path | None:
    """``name.gz`` or ``name`` in ``directory``, gzipped preferred; None if neither exists."""
    for candidate in (directory / f"{name}.gz", directory / name):
        if candidate.is_file():
            return candidate
    return None


def file_paths(directory: Path) -> dict[str, Path]:
    """Each of the four files' path in ``directory`` as the loader reads it (:func:`find_file`, else the
    plain name, whose read then reports it missing)."""
    return {name: find_file(directory, name) or directory / name for name in FILES}


def resolve_data_dir(root: Path) -> Path:
    """The directory that holds the four files, or a one-line DataError naming what is missing."""
    for directory in (root / "MNIST" / "raw", root):
        if all(find_file(directory, name) for name in FILES):
            return directory
    layout_dir = root / "MNIST" / "raw"
    missing = next(name for name in FILES if find_file(layout_dir, name) is None)
    raise DataError(f"{layout_dir / missing}(.gz) not found; {SEED_HINT}")


def data_files(directory: Path, paths: Mapping[str, Path] | None = None) -> dict[str, Any]:
    """The four files in ``directory`` as the loader reads them (``paths``, else :func:`file_paths`), each
    with its sha256, and whether the SHA256SUMS beside them lists them all: ``{"files": {name: {"file",
    "sha256"}}, "verified_by": "SHA256SUMS" or None}`` (lineage.json's ``data``, taken when the run loads
    them)."""
    sums_path = directory / SUMS_FILE
    listed = read_sums(sums_path) if sums_path.is_file() else {}
    files: dict[str, Any] = {}
    for name, path in (paths or file_paths(directory)).items():
        files[name] = {"file": path.name, "sha256": sha256_file(path)}
    verified = bool(listed) and all(entry["file"] in listed for entry in files.values())
    return {"files": files, "verified_by": SUMS_FILE if verified else None}


def verify_sums(directory: Path, known: Mapping[str, str] | None = None) -> None:
    """Check every file named in ``directory/SHA256SUMS`` (if that file exists); ``known`` gives the
    sha256 of files already hashed (by :func:`data_files`), which are not read again."""
    sums_path = directory / SUMS_FILE
    if not sums_path.is_file():
        return
    for name, expected in read_sums(sums_path).items():
        path = directory / name
        digest = (known or {}).get(name) or (sha256_file(path) if path.is_file() else expected)
        if digest != expected:
            raise DataError(f"{path}: sha256 does not match {sums_path}; the file is corrupt, re-seed it")


def decode_idx(path: Path) -> tuple[bytearray, int, list[int]]:
    """One IDX file (gzipped or raw) as ``(bytes, header length, shape)``, its header and size checked:
    a one-line DataError for anything that is not the MNIST file its name says. A file read ahead
    (:func:`read_ahead`) and unchanged since is taken from memory, once."""
    ahead = _read_ahead_entry(path)
    if ahead is not None:
        _READ_AHEAD.pop(_key(path), None)
        return ahead.decoded
    try:
        encoded = path.read_bytes()
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error}); re-seed it") from error
    return _decode(path, encoded)


def _decode(path: Path, encoded: bytes) -> tuple[bytearray, int, list[int]]:
    try:
        # One mutable buffer that a tensor can then share: no copies of the 47 MB training images.
        raw = bytearray(gzip.decompress(encoded) if path.suffix == ".gz" else encoded)
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise DataError(f"{path}: cannot read ({error}); re-seed it") from error
    base = path.name.removesuffix(".gz")
    ndim = 3 if "images" in base else 1
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header; re-seed it")
    magic, *dims = struct.unpack_from(f">I{ndim}I", raw)
    if magic != _IDX_MAGIC[ndim] or dims[0] != _EXPECTED_COUNT.get(base, dims[0]):
        raise DataError(f"{path}: not an MNIST IDX file (magic {magic:#x}, shape {dims}); re-seed it")
    expected = header + _product(dims)
    if len(raw) != expected:
        raise DataError(f"{path}: {len(raw)} bytes, expected {expected}; the file is truncated")
    return raw, header, dims


def _product(dims: list[int]) -> int:
    total = 1
    for dim in dims:
        total *= dim
    return total


@dataclass(frozen=True)
class _ReadAhead:
    signature: tuple[int, ...]  # the file's identity and last change when it was read (_signature)
    sha256: str
    decoded: tuple[bytearray, int, list[int]]


# Files read ahead in this process, by absolute path: a launcher reads them before it forks its ranks,
# which then find them here (trainer.read_ahead).
_READ_AHEAD: dict[str, _ReadAhead] = {}


def _key(path: Path) -> str:
    return os.path.abspath(path)


def _signature(path: Path) -> tuple[int, ...]:
    """Device, inode, size, and modification and change times in ns: any write, replacement or rename
    over the file changes one of them (the change time cannot be set back)."""
    status = path.stat()
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _read_ahead_entry(path: Path) -> _ReadAhead | None:
    entry = _READ_AHEAD.get(_key(path))
    if entry is None:
        return None
    try:
        unchanged = _signature(path) == entry.signature
    except OSError:
        unchanged = False
    if not unchanged:
        _READ_AHEAD.pop(_key(path), None)
        return None
    return entry


def is_read_ahead(path: Path) -> bool:
    """Whether ``path`` was read ahead into this process and is unchanged since."""
    return _read_ahead_entry(path) is not None


def read_ahead(root: Path) -> list[str]:
    """Read, hash and decode the four files under ``root`` (a data root, as ``--data``) into memory, for
    :func:`sha256_file` and :func:`decode_idx` to take from there while the file is unchanged; returns
    the paths read. It stops at the first file that cannot be read or decoded, leaving that file and
    the rest to the caller's own read, which then reports the problem as it would without this."""
    try:
        directory = resolve_data_dir(root)
    except (DataError, OSError):
        return []
    done: list[str] = []
    for path in file_paths(directory).values():
        try:
            before = _signature(path)
            encoded = path.read_bytes()
            entry = _ReadAhead(before, hashlib.sha256(encoded).hexdigest(), _decode(path, encoded))
            if _signature(path) != before:
                return done
        except (DataError, OSError):
            return done
        _READ_AHEAD[_key(path)] = entry
        done.append(_key(path))
    return done
