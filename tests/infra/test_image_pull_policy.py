"""The trainer image's pull policy: automatic from the reference (a tag can move, a digest cannot), or
as set; the same on every container that runs `jobImage` (trainer, seed Job, model server)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from infra.program.checks import ConfigError
from infra.program.common import yamlio
from infra.program.common.config import settings_from_raw
from infra.program.settings.base import pinned_by_digest
from tests.infra.conftest import BASE, render_config, stack_config

TAG = "ghcr.io/acme/trainer:0.2.0"
DIGEST = "sha256:" + "c" * 64
# Every workload that runs the trainer image: the training job, the seed Job and the model server.
EVERY_WORKLOAD = {"seedSource": "https", "serveKind": "deployment", "jobWait": True}


def _containers(value: Any) -> Iterator[dict[str, Any]]:
    """Every container (or init container) anywhere in a rendered object."""
    if isinstance(value, dict):
        if "image" in value and "name" in value:
            yield value
        for child in value.values():
            yield from _containers(child)
    elif isinstance(value, list):
        for child in value:
            yield from _containers(child)


def _policies(values: dict[str, Any]) -> dict[str, set[str]]:
    """imagePullPolicy per kind of the rendered objects whose containers run `jobImage`."""
    rendering = render_config({**EVERY_WORKLOAD, **values})
    found: dict[str, set[str]] = {}
    for obj in rendering.objects:
        for container in _containers(obj):
            if container["image"] == values["jobImage"]:
                found.setdefault(obj["kind"], set()).add(container["imagePullPolicy"])
    return found


@pytest.mark.parametrize(
    ("image", "policy"),
    [
        (TAG, "Always"),
        (f"ghcr.io/acme/trainer@{DIGEST}", "IfNotPresent"),
        (f"{TAG}@{DIGEST}", "IfNotPresent"),
        ("localhost:5000/trainer:0.2.0", "Always"),
    ],
)
def test_the_automatic_policy_pulls_a_tag_every_time_and_a_digest_once(image, policy):
    assert _policies({"jobImage": image}) == {
        "PyTorchJob": {policy},
        "Job": {policy},
        "Deployment": {policy},
    }


@pytest.mark.parametrize("explicit", ["IfNotPresent", "Always", "Never"])
@pytest.mark.parametrize("image", [TAG, f"{TAG}@{DIGEST}"])
def test_an_explicit_policy_wins(image, explicit):
    policies = _policies({"jobImage": image, "jobImagePullPolicy": explicit})
    assert set(policies) == {"PyTorchJob", "Job", "Deployment"}
    assert all(p == {explicit} for p in policies.values())


def test_the_indexed_job_gets_the_same_policy():
    assert _policies({"jobImage": TAG, "jobKind": "indexed-job", "serveKind": "none"}) == {"Job": {"Always"}}


def _settings(**values: str):
    config = stack_config({**BASE, **values})
    return settings_from_raw(config.values, set(config.secret_keys))[0]


def test_the_default_is_automatic():
    settings = _settings()
    assert settings.job_image_pull_policy == "auto"
    assert settings.job_image == "ghcr.io/ddp-mnist/trainer:0.1.0"
    assert settings.image_pull_policy == "Always"


def test_a_policy_outside_the_allowed_values_names_the_key():
    with pytest.raises(ConfigError) as error:
        _settings(jobImagePullPolicy="Sometimes")
    assert str(error.value) == (
        "config ddp-mnist:jobImagePullPolicy=Sometimes is invalid: "
        "must be one of 'auto', 'IfNotPresent', 'Always' or 'Never'"
    )


@pytest.mark.parametrize(
    ("image", "pinned"),
    [
        (TAG, False),
        (f"{TAG}@{DIGEST}", True),
        (f"ghcr.io/acme/trainer@{DIGEST}", True),
        ("ghcr.io/acme/trainer@sha256:abc", False),  # not a whole digest
        ("not an image", False),
    ],
)
def test_pinned_by_digest(image, pinned):
    assert pinned_by_digest(image) is pinned


def test_a_stack_that_requires_a_digest_refuses_a_tag_with_one_line():
    required = {**BASE, "jobImage": TAG, "jobImageDigestRequired": True}
    stack = stack_config(required)
    with pytest.raises(ConfigError) as raised:
        settings_from_raw(stack.values, set(stack.secret_keys))
    assert str(raised.value) == (
        f"config ddp-mnist:jobImage={TAG} is invalid: must be named by digest (image:tag@sha256:<64 hex>) "
        "when jobImageDigestRequired is true: a tag can be re-pushed; set the digest the release names "
        "(docs/RELEASE.md)"
    )
    for image in (f"{TAG}@{DIGEST}", f"ghcr.io/acme/trainer@{DIGEST}"):
        stack = stack_config({**required, "jobImage": image})
        settings, _ = settings_from_raw(stack.values, set(stack.secret_keys))
        assert settings.image_pull_policy == "IfNotPresent"
    stack = stack_config({**BASE, "jobImage": TAG})  # off by default: a tag is advised, not refused
    settings_from_raw(stack.values, set(stack.secret_keys))


def test_the_shipped_cloud_job_stacks_require_a_digest_and_render_with_a_stand_in_one():
    """Their file names the release by tag, which `pulumi up` refuses until the user sets the digest its
    release notes print; offline tools show them with an all-zero digest that names no image."""

    from infra.review.manifest import render, to_yaml
    from infra.stackconfig import ROOT, STAND_IN_DIGEST, from_mapping, load_stack, stack_names
    from tests.infra.conftest import ROLES

    cloud_jobs = [n for n in stack_names() if ROLES[n] == "job"]
    assert sorted(cloud_jobs) == ["aks-gpu", "eks-gpu", "gke-gpu", "gke-trainjob"]
    keys = {f"ddp-mnist:{k}": "[secret]" for k in ("minioAccessKey", "minioSecretKey")}
    keys |= {f"ddp-mnist:{k}": "[secret]" for k in ("minioReadAccessKey", "minioReadSecretKey")}
    for name in cloud_jobs:
        document = yamlio.load((ROOT / "stacks" / f"Pulumi.{name}.yaml").read_text())
        as_written = from_mapping(name, document["config"])
        with pytest.raises(ConfigError) as raised:  # the keys given, the tag alone is what is refused
            settings_from_raw({**as_written.values, **keys}, set(keys))
        assert str(raised.value).startswith(
            "config ddp-mnist:jobImage=ghcr.io/ddp-mnist/trainer:0.1.0 is invalid"
        )
        stack = load_stack(name)
        assert stack.values["ddp-mnist:jobImageDigestRequired"] == "true"
        assert stack.values["ddp-mnist:jobImage"] == f"ghcr.io/ddp-mnist/trainer:0.1.0@{STAND_IN_DIGEST}"
        rendering = render(stack)
        assert {c["image"] for o in rendering.objects for c in _containers(o)} >= {
            stack.values["ddp-mnist:jobImage"]
        }
        assert "# jobImage's digest stands in (sha256:00000000...): the stack requires" in to_yaml(rendering)
    dev = load_stack("dev")
    assert "@" not in dev.values.get("ddp-mnist:jobImage", "ghcr.io/ddp-mnist/trainer:0.1.0")
