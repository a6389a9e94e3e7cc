"""The release workflow: a tag builds, pushes, signs and attests the trainer image once, by digest, and
the release notes name that digest. Its shell steps run here with bash, a stub `gh` in place of GitHub's.

(The checks every workflow shares, with the release's pins and permissions among them, are in
test_workflows.py.)"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.ci.test_workflows import ACTIONS, PINNED, WORKFLOWS, _load

RELEASE = _load(WORKFLOWS / "release.yml")
IMAGE_JOB = RELEASE["jobs"]["image"]
STEPS = IMAGE_JOB["steps"]
DIGEST = "sha256:" + "0123456789abcdef" * 4
BUILD_DIGEST = "${{ steps.build.outputs.digest }}"
IMAGE_NAME = "${{ steps.names.outputs.image }}"


def _step(**match: object) -> dict:
    (step,) = [s for s in STEPS if all(s.get(k) == v for k, v in match.items())]
    return step


def _uses(action: str) -> dict:
    (step,) = [s for s in STEPS if s.get("uses", "").startswith(f"{action}@")]
    return step


def _index(step: dict) -> int:
    return next(i for i, s in enumerate(STEPS) if s is step)


def test_only_a_version_tag_releases():
    assert RELEASE["on"] == {"push": {"tags": ["v*"]}}
    assert RELEASE["concurrency"] == {"group": "release-${{ github.ref }}", "cancel-in-progress": False}


def test_every_action_of_the_release_is_pinned_to_a_read_commit():
    text = (WORKFLOWS / "release.yml").read_text()
    uses = [line.split("uses:", 1)[1].strip() for line in text.splitlines() if "uses:" in line]
    assert len(uses) == 6
    for pinned in uses:
        match = PINNED.match(pinned)
        assert match, pinned
        assert ACTIONS[f"{match['action']}@{match['sha']}"][0] == match["tag"], pinned


def test_the_image_is_built_once_with_sbom_and_max_provenance_and_pushed():
    build = _step(id="build")
    assert build["uses"].startswith("docker/build-push-action@")
    assert build["with"]["push"] is True
    assert build["with"]["sbom"] is True
    assert build["with"]["provenance"] == "mode=max"
    assert (build["with"]["context"], build["with"]["file"]) == (".", "Dockerfile")
    assert build["with"]["tags"] == f"{IMAGE_NAME}:${{{{ steps.names.outputs.version }}}}"
    assert "org.opencontainers.image.revision=${{ github.sha }}" in build["with"]["labels"]
    created = "${{ steps.names.outputs.created }}"
    assert f"org.opencontainers.image.created={created}" in build["with"]["labels"]
    # The Dockerfile's build arguments: the same commit and time, which each run's lineage.json records.
    assert build["with"]["build-args"].splitlines() == [
        "SOURCE_COMMIT=${{ github.sha }}",
        f"BUILD_TIME={created}",
    ]
    login = _uses("docker/login-action")
    assert login["with"]["registry"] == "ghcr.io"
    assert login["with"]["password"] == "${{ secrets.GITHUB_TOKEN }}"
    assert _index(_uses("docker/setup-buildx-action")) < _index(login) < _index(build)
    pushes = [s for s in STEPS if "build-push-action" in s.get("uses", "") or "docker " in s.get("run", "")]
    assert pushes == [build]


def test_the_pushed_digest_is_signed_keylessly_and_verified():
    build = _step(id="build")
    installer = _uses("sigstore/cosign-installer")
    assert re.fullmatch(r"v\d+\.\d+\.\d+", installer["with"]["cosign-release"])
    sign = _step(name="Sign the pushed digest (keyless)")
    assert sign["run"] == 'cosign sign --yes "$IMAGE@$DIGEST"'
    assert sign["env"] == {"IMAGE": IMAGE_NAME, "DIGEST": BUILD_DIGEST}
    verify = _step(name="Verify the signature as a user would")
    assert verify["env"]["DIGEST"] == BUILD_DIGEST
    assert verify["env"]["IDENTITY"] == "${{ github.server_url }}/${{ github.workflow_ref }}"
    assert "--certificate-oidc-issuer https://token.actions.githubusercontent.com" in verify["run"]
    assert _index(build) < _index(installer) < _index(sign) < _index(verify)
    assert "--key" not in sign["run"] and "COSIGN_PRIVATE_KEY" not in str(RELEASE)
    assert IMAGE_JOB["permissions"]["id-token"] == "write"


def test_github_attests_the_same_digest_in_the_registry():
    attest = _uses("actions/attest-build-provenance")
    assert attest["with"]["subject-name"] == IMAGE_NAME
    assert attest["with"]["subject-digest"] == BUILD_DIGEST
    assert attest["with"]["push-to-registry"] is True
    assert IMAGE_JOB["permissions"]["attestations"] == "write"


def test_the_digest_is_the_jobs_output_and_the_release_reads_it():
    assert IMAGE_JOB["outputs"] == {
        "image": IMAGE_NAME,
        "version": "${{ steps.names.outputs.version }}",
        "digest": BUILD_DIGEST,
    }
    release = RELEASE["jobs"]["release"]
    assert release["needs"] == "image"
    (step,) = release["steps"]
    assert step["env"]["DIGEST"] == "${{ needs.image.outputs.digest }}"
    assert step["env"]["IMAGE"] == "${{ needs.image.outputs.image }}"


def test_no_expression_is_spliced_into_a_script():
    """A tag or branch name reaches the scripts only through env (no `${{ }}` inside `run:`)."""
    for job in RELEASE["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), step


# --- the scripts, run ------------------------------------------------------------------------------


def _bash(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        env={"PATH": os.environ["PATH"], **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("tag", "version"), [("v0.2.0", "0.2.0"), ("v1.10.3-rc.1", "1.10.3-rc.1"), ("v2.0.0", "2.0.0")]
)
def test_the_image_name_is_lowercase_and_the_version_is_the_tag_without_v(tmp_path, tag, version):
    output = tmp_path / "output"
    result = _bash(
        _step(id="names")["run"], {"OWNER": "DDP-Mnist", "TAG": tag, "GITHUB_OUTPUT": str(output)}, tmp_path
    )
    assert result.returncode == 0, result.stderr
    image, version_line, created = output.read_text().splitlines()
    assert (image, version_line) == ("image=ghcr.io/ddp-mnist/trainer", f"version={version}")
    assert re.fullmatch(r"created=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", created)


@pytest.mark.parametrize("tag", ["v1.2", "version-1", "v1.2.3/../x", "vlatest"])
def test_a_tag_that_is_no_version_stops_the_release(tmp_path, tag):
    output = tmp_path / "output"
    env = {"OWNER": "o", "TAG": tag, "GITHUB_OUTPUT": str(output)}
    result = _bash(_step(id="names")["run"], env, tmp_path)
    assert result.returncode == 1
    assert result.stdout == (
        f"::error::a release tag is vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-PRERELEASE, not '{tag}'\n"
    )
    assert not output.exists()


def _release(tmp_path: Path, version: str) -> tuple[list[str], str]:
    """The release step run with a `gh` that records its arguments: (arguments, notes)."""
    stub = tmp_path / "bin" / "gh"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$GH_ARGS"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    (step,) = RELEASE["jobs"]["release"]["steps"]
    env = {
        "PATH": f"{stub.parent}:{os.environ['PATH']}",
        "GH_ARGS": str(tmp_path / "args"),
        "GH_TOKEN": "t",
        "REPOSITORY": "ddp-mnist/ddp-mnist",
        "TAG": f"v{version}",
        "IMAGE": "ghcr.io/ddp-mnist/trainer",
        "VERSION": version,
        "DIGEST": DIGEST,
        "IDENTITY": f"https://github.com/ddp-mnist/ddp-mnist/.github/workflows/release.yml@refs/tags/v{version}",
    }
    result = _bash(step["run"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    return (tmp_path / "args").read_text().splitlines(), (tmp_path / "notes.md").read_text()


def test_the_release_notes_name_the_image_by_digest_and_how_to_verify_it(tmp_path):
    args, notes = _release(tmp_path, "0.2.0")
    assert args == [
        "release",
        "create",
        "v0.2.0",
        "--repo",
        "ddp-mnist/ddp-mnist",
        "--verify-tag",
        "--title",
        "v0.2.0",
        "--notes-file",
        "notes.md",
    ]
    reference = f"ghcr.io/ddp-mnist/trainer@{DIGEST}"
    assert f"\n{reference}\n" in notes
    assert f"pulumi config set jobImage {reference}\n" in notes
    assert (
        f"cosign verify {reference} \\\n"
        "  --certificate-identity https://github.com/ddp-mnist/ddp-mnist/.github/workflows/release.yml"
        "@refs/tags/v0.2.0 \\\n"
        "  --certificate-oidc-issuer https://token.actions.githubusercontent.com\n"
    ) in notes
    assert f"gh attestation verify oci://{reference} --repo ddp-mnist/ddp-mnist\n" in notes
    assert f"docker buildx imagetools inspect {reference} --format '{{{{ json .SBOM }}}}'" in notes
    assert "$" not in notes  # every variable expanded


def test_a_pre_release_tag_makes_a_pre_release(tmp_path):
    args, notes = _release(tmp_path, "0.3.0-rc.1")
    assert args[-1] == "--prerelease"
    assert "`ghcr.io/ddp-mnist/trainer:0.3.0-rc.1`" in notes


@pytest.mark.parametrize(("schema", "ok"), [("0.2.0", True), ("0.1.0", False), ("0.2.0-rc.1", False)])
def test_a_tag_whose_version_the_component_package_lacks_stops_before_the_build(tmp_path, schema, ok):
    step = _step(id="package-version")
    assert _index(step) < _index(_step(id="build"))
    (tmp_path / "infra" / "component").mkdir(parents=True)
    (tmp_path / "infra" / "component" / "schema.json").write_text(json.dumps({"version": schema}))
    result = _bash(step["run"], {"VERSION": "0.2.0"}, tmp_path)
    assert (result.returncode == 0) is ok
    if not ok:
        assert f"infra/component/schema.json is version {schema}, the tag 0.2.0" in result.stdout
