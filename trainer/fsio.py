"""Crash-safe file writes: a reader sees the old file or the complete new one, never a torn one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same directory, fsync it, ``os.replace`` it, fsync the dir."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(handle, 0o666 & ~_current_umask())
        with os.fdopen(handle, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _current_umask() -> int:
    """mkstemp creates 0600 files; give the result the mode a plain open() would have."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_json(path: Path, payload: Any) -> None:
    atomic_write_bytes(path, (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode())


def fsync_dir(directory: Path) -> None:
    """Persist a rename: fsync the directory entry (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def writable_dir(directory: Path) -> OSError | None:
    """Create ``directory`` (and its parents) and write and remove a file in it: the error that stops
    either, or None when this process can write there."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(dir=directory, prefix=".writable.", suffix=".tmp")
        os.close(handle)
        os.unlink(name)
    except OSError as error:
        return error
    return None
