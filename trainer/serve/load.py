"""The model the server serves: model.pt and SHA256SUMS read from a directory or an S3 export,
model.pt's sha256 checked against SHA256SUMS, and the state_dict loaded into the model (no pickled
code). Every failure is a DataError (exit 3) or the S3 client's own error (exits 4, 5) in one line.

lineage.json (:mod:`trainer.lineage`) is read when SHA256SUMS lists it, and then it must match its
sum and name this model.pt; an export older than it (SHA256SUMS lists model.pt alone) serves
without one.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path
from typing import Any

from trainer.errors import DataError
from trainer.serve.config import LINEAGE_FILE, MODEL_FILE, SUMS_FILE


def read_model_files(uri: str) -> tuple[bytes, str, str]:
    """model.pt's bytes, the SHA256SUMS text and where they came from (for messages)."""
    if uri.startswith("s3://"):
        return read_from_s3(uri)
    directory = Path(uri)
    files = {
        name: _read(directory / name, "serve a finished run's output directory")
        for name in (SUMS_FILE, MODEL_FILE)
    }
    return files[MODEL_FILE], files[SUMS_FILE].decode(errors="replace"), str(directory)


def _read(path: Path, hint: str) -> bytes:
    """A file's bytes; a DataError naming it (and `hint` when it is missing) otherwise."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path} not found; {hint}") from None
    except OSError as error:
        raise DataError(f"{path}: cannot read ({error.strerror})") from None


def read_from_s3(uri: str) -> tuple[bytes, str, str]:
    from trainer.s3 import S3Location, make_client, read_object

    location = S3Location.parse(uri)
    client = make_client()
    files: dict[str, bytes] = {}
    for name in (SUMS_FILE, MODEL_FILE):
        data = read_object(client, location, name)
        if data is None:
            raise DataError(f"{location.url(name)} not found; export the run with --export-to {uri}")
        files[name] = data
    return files[MODEL_FILE], files[SUMS_FILE].decode(errors="replace"), location.url().rstrip("/") + "/"


def verify(model_bytes: bytes, sums_text: str, where: str) -> str:
    """model.pt's sha256, after checking it against SHA256SUMS; a DataError otherwise."""
    from trainer.mnist_files import parse_sums

    sums_where = f"{where.rstrip('/')}/{SUMS_FILE}"
    expected = parse_sums(sums_text, sums_where).get(MODEL_FILE)
    if expected is None:
        raise DataError(f"{sums_where} does not list {MODEL_FILE}")
    actual = hashlib.sha256(model_bytes).hexdigest()
    if actual != expected:
        raise DataError(
            f"{where.rstrip('/')}/{MODEL_FILE}: sha256 {actual} does not match {SUMS_FILE} ({expected}); "
            "the model is corrupt or was replaced, export it again"
        )
    return actual


def verify_against_job(sha256: str, where: str, sums_path: str) -> None:
    """Check model.pt's sha256 against the SHA256SUMS the training job wrote (`--sums-from`); a
    DataError otherwise: a model that matches only the sums beside it was replaced with them."""
    from trainer.mnist_files import parse_sums

    text = _read(Path(sums_path), "the training job that produced the model wrote none").decode(
        errors="replace"
    )
    expected = parse_sums(text, sums_path).get(MODEL_FILE)
    if expected != sha256:
        raise DataError(
            f"{where.rstrip('/')}/{MODEL_FILE}: sha256 {sha256} is not the model the training job wrote "
            f"({expected or 'none'} in {sums_path}); the export was replaced, export the run again"
        )


def read_lineage(uri: str, sums_text: str, where: str, model_sha256: str) -> tuple[str, str] | None:
    """lineage.json's text and sha256 when SHA256SUMS lists it, after checking both its sum and that
    it names this model.pt; None when SHA256SUMS does not list it (an export older than lineage)."""
    from trainer.mnist_files import parse_sums

    root = where.rstrip("/")
    expected = parse_sums(sums_text, f"{root}/{SUMS_FILE}").get(LINEAGE_FILE)
    if expected is None:
        return None
    data = _read_export_file(uri, LINEAGE_FILE)
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise DataError(
            f"{root}/{LINEAGE_FILE}: sha256 {actual} does not match {SUMS_FILE} ({expected}); "
            "it is corrupt or was replaced, export the run again"
        )
    try:
        named = json.loads(data)["model"]["sha256"]
    except (ValueError, KeyError, TypeError):
        named = None
    if named != model_sha256:
        raise DataError(
            f"{root}/{LINEAGE_FILE} does not name this {MODEL_FILE} ({model_sha256}) as its model"
        )
    return data.decode(), actual


def _read_export_file(uri: str, name: str) -> bytes:
    """One more file of the export ``uri`` (a directory or s3://), listed in its SHA256SUMS."""
    if not uri.startswith("s3://"):
        return _read(Path(uri) / name, f"{SUMS_FILE} lists it")
    from trainer.s3 import S3Location, make_client, read_object

    location = S3Location.parse(uri)
    data = read_object(make_client(), location, name)
    if data is None:
        raise DataError(f"{location.url(name)} not found; {SUMS_FILE} lists it, export the run again")
    return data


def verify_lineage_against_job(lineage: tuple[str, str] | None, where: str, sums_path: str) -> None:
    """Where the job's SHA256SUMS (`--sums-from`) lists lineage.json, the export's must be that one."""
    from trainer.mnist_files import parse_sums

    text = _read(Path(sums_path), "the training job that produced the model wrote none").decode(
        errors="replace"
    )
    expected = parse_sums(text, sums_path).get(LINEAGE_FILE)
    actual = lineage[1] if lineage else None
    if expected is not None and actual != expected:
        raise DataError(
            f"{where.rstrip('/')}/{LINEAGE_FILE}: sha256 {actual or 'none'} is not the lineage the training "
            f"job wrote ({expected} in {sums_path}); the export was replaced, export the run again"
        )


def load_module(model_bytes: bytes, where: str) -> Any:
    """The model in eval mode on CPU (channels-last) from a state_dict, loaded without pickled code."""
    import torch

    from trainer.model import MnistCNN

    try:
        state = torch.load(io.BytesIO(model_bytes), map_location="cpu", weights_only=True)
        module = MnistCNN()
        module.load_state_dict(state)
    except Exception as error:  # any unpickling or key/shape mismatch: the file is not this model
        text = " ".join(str(error).split())[:200]
        raise DataError(f"{where.rstrip('/')}/{MODEL_FILE} is not this model's state_dict ({text})") from None
    module.eval()
    return module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
