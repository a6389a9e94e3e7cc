"""`make manifests` / `make manifests-check` without building anything: what the check reports for each
kind of difference, and its exit codes (the build itself is scenario 23 of the local tier)."""

from __future__ import annotations

import shutil

from infra.localcluster import manifests
from infra.program.common import vendored
from infra.program.common.vendored import INDEX, MANIFESTS


def _as_built() -> tuple[dict[str, bytes], str]:
    """The vendored files as if the modules built them so (no Go here)."""
    recorded = {path for c in vendored.index().values() for path in c.sums}
    return {path: (MANIFESTS / path).read_bytes() for path in recorded}, (MANIFESTS / INDEX).read_text()


def test_the_check_finds_nothing_when_the_files_are_what_was_built():
    assert manifests.differences(*_as_built()) == []


def test_the_check_names_a_changed_a_missing_and_an_extra_file(tmp_path, monkeypatch):
    copy = shutil.copytree(MANIFESTS, tmp_path / "manifests")
    monkeypatch.setattr(manifests, "MANIFESTS", copy)
    files, index = _as_built()
    (copy / "kubeflow-trainer" / "manifests.yaml").write_text("changed\n")
    (copy / "training-operator" / "kustomization.yaml").unlink()
    (copy / "kserve" / "patch.yaml").write_text("{}\n")
    found = manifests.differences(files, index)
    built = manifests.sha256(files["kubeflow-trainer/manifests.yaml"])
    edited = manifests.sha256(b"changed\n")
    assert found == [
        f"kubeflow-trainer/manifests.yaml: sha256 {edited}, the modules build {built}",
        "training-operator/kustomization.yaml: missing (the modules build it)",
        "kserve/patch.yaml: not built from any module (remove it)",
    ]


def test_write_puts_every_file_and_the_index_back_and_removes_the_rest(tmp_path, monkeypatch):
    copy = shutil.copytree(MANIFESTS, tmp_path / "manifests")
    monkeypatch.setattr(manifests, "MANIFESTS", copy)
    files, index = _as_built()
    (copy / "kserve" / "kserve.yaml").write_text("changed\n")
    (copy / "kserve" / "patch.yaml").write_text("{}\n")
    manifests.write(files, index)
    assert manifests.differences(files, index) == []
    assert (copy / "README.md").is_file()  # written by hand, kept


def test_without_go_the_check_stops_with_one_line_and_exit_3(monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    assert manifests.main(["--check"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no Go toolchain on PATH" in err[0]
