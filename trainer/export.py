"""Model export: rank 0 uploads the finished run's model to object storage (``--export-to``).

    s3://BUCKET/PREFIX/model.pt       the output dir's model.pt
    s3://BUCKET/PREFIX/metrics.json   the output dir's metrics.json
    s3://BUCKET/PREFIX/lineage.json   the output dir's lineage.json (a run older than it has none)
    s3://BUCKET/PREFIX/SHA256SUMS     sha256sum format, of those; uploaded last

Rank 0 exports once the process group is gone: every rank has passed the final barrier and the
others have exited 0, so a slow or failing upload never holds a collective open, and its error is
rank 0's own exit code, never "peer lost" elsewhere. The upload only reads the local files: on a
failure (4 credentials, 205 endpoint unreachable, 207 anything else) the checkpoints, model.pt and
metrics.json stay as they are, and starting the finished run again retries the export without
training. Because SHA256SUMS goes last, one that lists this model.pt means the export completed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainer.errors import DataError, ExportError, S3CredentialsError, S3UnreachableError, TrainerError
from trainer.metrics import LINEAGE_FILE, METRICS_FILE, MODEL_FILE
from trainer.mnist_files import SUMS_FILE, format_sums, parse_sums
from trainer.s3 import S3Location, classify, error_code, make_client, open_object

EXPORTED = (MODEL_FILE, METRICS_FILE)
# Exported when the output dir has it: a run finished before lineage.json existed has none.
OPTIONAL = (LINEAGE_FILE,)


def export_model(
    output_dir: Path, destination: str, finished_before: bool, say: Callable[[str], None]
) -> None:
    """Upload ``output_dir``'s model.pt, metrics.json and lineage.json, then their SHA256SUMS, to
    ``destination``.

    For a run that had already finished (``finished_before``) it first checks the destination and
    uploads only when it does not hold this run's export yet.
    """
    location = S3Location.parse(destination)
    folder = location.url().rstrip("/") + "/"
    hint = f"{output_dir} keeps model.pt and metrics.json; start the same run again to retry the export"
    payload = local_files(output_dir)
    sums = {name: hashlib.sha256(data).hexdigest() for name, data in payload.items()}
    client = make_client()
    with export_errors(folder, hint):
        if finished_before:
            missing = why_not_exported(client, location, payload, sums)
            if missing is None:
                say(f"{folder} already holds this run's model.pt and metrics.json ({SUMS_FILE} matches)")
                return
            say(f"retrying the export of the finished run to {folder}: {missing}")
        for name, data in payload.items():
            put(client, location, name, data)
        put(client, location, SUMS_FILE, format_sums(sums).encode())
    say(f"exported {', '.join(payload)} and {SUMS_FILE} to {folder}")


def local_files(output_dir: Path) -> dict[str, bytes]:
    """The bytes to upload, read once: what is hashed is what is sent."""
    try:
        payload = {name: (output_dir / name).read_bytes() for name in EXPORTED}
        for name in OPTIONAL:
            if (output_dir / name).is_file():
                payload[name] = (output_dir / name).read_bytes()
    except OSError as error:
        raise ExportError(f"model export: cannot read {error.filename} ({error.strerror})") from None
    return payload


def why_not_exported(
    client: Any, location: S3Location, payload: dict[str, bytes], sums: dict[str, str]
) -> str | None:
    """None when ``location`` holds this run's export, else why not (for the retry line).

    This run's export: a SHA256SUMS naming this model.pt (and this lineage.json, which a restart never
    rewrites), and a metrics.json that matches it and has this run's figures. Restarts of the finished
    run append to the local metrics.json's ``restarts`` only, so those are left out of the comparison.
    """
    remote_sums = read(client, location, SUMS_FILE)
    if remote_sums is None:
        return f"no {SUMS_FILE} there yet"
    try:
        listed = parse_sums(remote_sums.decode(errors="replace"), location.url(SUMS_FILE))
    except DataError:
        return f"its {SUMS_FILE} is unreadable"
    if listed.get(MODEL_FILE) != sums[MODEL_FILE]:
        return f"its {SUMS_FILE} does not list this run's model.pt"
    for name in OPTIONAL:
        if name in sums and listed.get(name) != sums[name]:
            return f"its {SUMS_FILE} does not list this run's {name}"
    if listed.get(METRICS_FILE) == sums[METRICS_FILE]:
        return None
    remote_metrics = read(client, location, METRICS_FILE)
    if remote_metrics is None or hashlib.sha256(remote_metrics).hexdigest() != listed.get(METRICS_FILE):
        return f"its metrics.json is missing or does not match its {SUMS_FILE}"
    if figures(remote_metrics) != figures(payload[METRICS_FILE]):
        return "its metrics.json is another run's"
    return None


def figures(metrics: bytes) -> Any:
    """metrics.json without ``restarts``; None if it is not a JSON object."""
    try:
        content = json.loads(metrics)
    except ValueError:
        return None
    return {k: v for k, v in content.items() if k != "restarts"} if isinstance(content, dict) else None


def read(client: Any, location: S3Location, name: str) -> bytes | None:
    body = open_object(client, location, name)
    return None if body is None else bytes(body.read())


def put(client: Any, location: S3Location, name: str, data: bytes) -> None:
    """One object; a missing bucket is created (a stack whose data never went through S3 has none)."""
    from botocore.exceptions import ClientError

    try:
        client.put_object(Bucket=location.bucket, Key=location.key(name), Body=data)
    except ClientError as error:
        if error_code(error) != "NoSuchBucket":
            raise
        client.create_bucket(Bucket=location.bucket)
        client.put_object(Bucket=location.bucket, Key=location.key(name), Body=data)


@contextmanager
def export_errors(folder: str, hint: str) -> Iterator[None]:
    """S3 errors as the export's exit codes: 4 credentials, 205 unreachable, 207 anything else."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except TrainerError as error:  # raised by trainer.s3 helpers, already classified
        raise export_error(error, error, folder, hint) from None
    except (BotoCoreError, ClientError) as error:
        try:
            classified: TrainerError | None = classify(error, folder)
        except BotoCoreError:  # one classify does not know: not credentials, not reach
            classified = None
        raise export_error(classified, error, folder, hint) from None


def export_error(classified: TrainerError | None, error: Exception, folder: str, hint: str) -> TrainerError:
    """One line naming the destination and the cause, with the exit code of its class."""
    if isinstance(classified, (S3CredentialsError, S3UnreachableError)):
        return type(classified)(f"model export failed: {classified}; {hint}")
    return ExportError(f"model export to {folder} failed: {cause(error)}; {hint}")


def cause(error: Exception) -> str:
    response = getattr(error, "response", None)
    if isinstance(response, dict) and "Error" in response:
        info = response["Error"]
        return f"S3 error {info.get('Code', '')}: {info.get('Message', '')}".rstrip(": ")
    text = " ".join(str(error).split())
    if isinstance(error, TrainerError) or not text:
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}"
