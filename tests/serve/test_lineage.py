"""The server and lineage.json: verified against SHA256SUMS (and the job's, with --sums-from) before it
is returned in the model metadata; an export older than lineage serves without it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import start_server, wait_ready
from tests.serve.test_serve import copy_run, good, never_ready, s3_client, upload

pytestmark = pytest.mark.slow  # a small training run, then a real model server per test


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sums(run: Path, names: tuple[str, ...]) -> None:
    (run / "SHA256SUMS").write_text("".join(f"{_sha256((run / n).read_bytes())}  {n}\n" for n in names))


def test_an_export_older_than_lineage_serves_without_it(trained: Path, tmp_path: Path) -> None:
    run = copy_run(trained, tmp_path / "older")
    (run / "lineage.json").unlink()
    _sums(run, ("model.pt",))
    served = start_server(str(run))
    try:
        wait_ready(served)
        good(served)
        status, metadata = served.call("GET", "/v2/models/mnist")
    finally:
        code, out, err = served.stop()
    assert code == 0, err
    assert status == 200 and "parameters" not in metadata
    assert "(model.pt sha256 " in out and "lineage.json" not in out


@pytest.mark.parametrize("change", ["tampered", "missing", "another-model"])
def test_a_lineage_that_does_not_verify_never_becomes_ready(
    trained: Path, tmp_path: Path, change: str
) -> None:
    run = copy_run(trained, tmp_path / change)
    lineage = run / "lineage.json"
    listed = _sha256(lineage.read_bytes())
    if change == "tampered":
        lineage.write_text(lineage.read_text().replace('"seed": 0', '"seed": 1'))
        line = f"lineage.json: sha256 {_sha256(lineage.read_bytes())} does not match SHA256SUMS ({listed}); "
    elif change == "missing":
        lineage.unlink()
        line = "lineage.json not found; SHA256SUMS lists it"
    else:
        record = json.loads(lineage.read_text())
        record["model"]["sha256"] = "0" * 64
        lineage.write_text(json.dumps(record))
        _sums(run, ("lineage.json", "model.pt"))
        model = _sha256((run / "model.pt").read_bytes())
        line = f"lineage.json does not name this model.pt ({model}) as its model"
    code, err = never_ready(start_server(str(run)))
    assert code == 3
    assert len(err.splitlines()) == 1 and err.startswith(f"trainer.serve: data: {run}/"), err
    assert line in err


def test_a_lineage_replaced_in_s3_with_its_sums_is_not_the_job_s(s3_server: Any, trained: Path) -> None:
    """The model as the job wrote it, but lineage.json and SHA256SUMS replaced together in the bucket:
    the job's own SHA256SUMS (--sums-from) lists another lineage.json."""
    uri = upload(s3_server, trained, "models-lineage", "team/models/job-l/")
    record = json.loads((trained / "lineage.json").read_text())
    record["settings"]["seed"] = 7
    forged = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    model = _sha256((trained / "model.pt").read_bytes())
    client = s3_client(s3_server)
    client.put_object(Bucket="models-lineage", Key="team/models/job-l/lineage.json", Body=forged)
    sums = f"{_sha256(forged)}  lineage.json\n{model}  model.pt\n"
    client.put_object(Bucket="models-lineage", Key="team/models/job-l/SHA256SUMS", Body=sums.encode())
    job_sums = str(trained / "SHA256SUMS")
    code, err = never_ready(start_server(uri, f"--sums-from={job_sums}", env=s3_server.env()))
    assert code == 3
    assert err.splitlines() == [
        f"trainer.serve: data: {uri.rstrip('/')}/lineage.json: sha256 {_sha256(forged)} is not the lineage "
        f"the training job wrote ({_sha256((trained / 'lineage.json').read_bytes())} in {job_sums}); "
        "the export was replaced, export the run again"
    ]
