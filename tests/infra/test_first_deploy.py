"""A first `pulumi up` on a fresh cluster: where the S3 keys come from, the how-to's walkthrough as
written, and the port the NetworkPolicies open towards MinIO."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from infra.program.checks import ConfigError
from infra.program.common import yamlio
from infra.program.common.config import settings_from_raw
from infra.program.settings import PROJECT
from infra.review.manifest import RecordingMocks, run_program
from infra.stackconfig import ROOT, STAND_IN_DIGEST, StackConfig, from_mapping, load_stack
from tests.infra.conftest import (
    BASE,
    JOB_STACKS,
    by_kind,
    pod_templates,
    render_config,
    shipped,
    stack_config,
)

S3_JOB = {"jobDataSource": "s3", "minioEndpoint": "minio.minio.svc:9000", "minioTls": False}
# Reads MNIST through the seed Job from the bucket, and exports the model to it.
S3_SEED = {
    "minioEndpoint": "minio.minio.svc:9000",
    "minioTls": False,
    "seedSource": "s3",
    "jobModelExport": True,
}
KEYS = {"minioAccessKey": "AKIAEXAMPLE", "minioSecretKey": "example-secret"}


def _stack_file(name: str) -> StackConfig:
    """A stack file exactly as checked in (no offline stand-ins for its unset secret keys)."""
    document = yamlio.load((ROOT / "stacks" / f"Pulumi.{name}.yaml").read_text())
    return from_mapping(name, document["config"])


def _secret_refs(rendering) -> set[str]:
    return {
        env["valueFrom"]["secretKeyRef"]["name"]
        for template in pod_templates(rendering)
        for container in template["spec"]["containers"]
        for env in container.get("env", [])
        if "secretKeyRef" in env.get("valueFrom", {})
    }


# --- where the keys come from ---------------------------------------------------------------


def test_an_existing_secret_in_a_namespace_the_stack_creates_is_refused_before_anything_is_registered():
    mocks = RecordingMocks()
    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**BASE, **S3_JOB, "minioExistingSecret": "minio-training"}), mocks)
    assert str(raised.value) == (
        "config ddp-mnist:minioExistingSecret=minio-training is invalid: must be empty when createNamespace "
        "is true (the stack creates namespace ddp-mnist, so no Secret can be in it before `pulumi up`): set "
        "minioAccessKey and minioSecretKey with --secret and the stack creates the Secret, or set "
        "createNamespace false for a namespace prepared beforehand"
    )
    assert mocks.registrations == []


def test_an_existing_secret_is_read_so_a_missing_one_fails_the_deployment_by_name():
    rendering = render_config(
        {
            **S3_SEED,
            "namespace": "team-a",
            "createNamespace": False,
            "minioExistingSecret": "minio-training",
        }
    )
    assert by_kind(rendering, "Secret") == []
    (read,) = [r for r in rendering.registrations if r.read_id]
    assert (read.type, read.read_id) == ("kubernetes:core/v1:Secret", "team-a/minio-training")
    assert _secret_refs(rendering) == {"minio-training"}
    assert rendering.outputs["s3SecretName"] == "minio-training"
    # The seed Job and the training job take the name from the read: neither starts before it succeeded.
    workloads = [r for r in rendering.registrations if r.name in ("seed-job", "trainer-job")]
    assert len(workloads) == 2
    assert all(read.name in w.dependencies for w in workloads)


def test_keys_from_secret_config_become_the_stacks_own_secret_in_the_namespace_it_creates():
    rendering = render_config(S3_JOB, secrets=KEYS)
    (secret,) = by_kind(rendering, "Secret")
    assert secret["metadata"] == {**secret["metadata"], "name": "ddp-mnist-s3", "namespace": "ddp-mnist"}
    assert by_kind(rendering, "Namespace")[0]["metadata"]["name"] == "ddp-mnist"
    assert _secret_refs(rendering) == {"ddp-mnist-s3"}
    assert not [r for r in rendering.registrations if r.read_id]


S3_STACKS = ["aks-gpu", "dev", "eks-gpu", "gke-gpu"]


@pytest.mark.parametrize("name", S3_STACKS)
def test_shipped_stacks_own_their_secret_and_ask_for_the_keys(name):
    stack = _stack_file(name)
    assert f"{PROJECT}:minioExistingSecret" not in stack.values
    with pytest.raises(ConfigError) as raised:
        settings_from_raw(stack.values, set(stack.secret_keys))
    assert str(raised.value).startswith("config ddp-mnist:minioAccessKey=(unset) is invalid: must be set")
    rendering = shipped(name)  # offline, the keys stand in as set
    secrets = sorted(s["metadata"]["name"] for s in by_kind(rendering, "Secret"))
    # A stack whose seed or server only reads asks for the read-only pair too (minioReadKeysRequired).
    readers = stack.values.get(f"{PROJECT}:minioReadKeysRequired") == "true"
    expected = ["ddp-mnist-s3", "ddp-mnist-s3-read"] if readers else ["ddp-mnist-s3"]
    assert secrets == expected
    assert _secret_refs(rendering) == {"ddp-mnist-s3"}  # the training job's pods: the read/write pair


def test_the_offline_stand_in_keys_only_fill_a_gap_the_program_would_refuse():
    without_s3 = [n for n in JOB_STACKS if n not in S3_STACKS]
    assert without_s3
    for name in without_s3:
        loaded, written = load_stack(name), _stack_file(name)
        image = "ddp-mnist:jobImage"
        if written.values.get("ddp-mnist:jobImageDigestRequired") == "true":
            # The one other stand-in: the digest a release names (tests/infra/test_image_pull_policy.py).
            assert loaded.values[image] == f"{written.values[image]}@{STAND_IN_DIGEST}"
            loaded = StackConfig(
                loaded.name, {**loaded.values, image: written.values[image]}, loaded.secret_keys
            )
        assert loaded == written


# --- docs/how-to/write-a-stack.md's walkthrough, as written --------------------------------

HOW_TO = ROOT / "docs" / "how-to" / "write-a-stack.md"


def _walkthrough() -> list[list[str]]:
    """The commands of the first shell block under "## Bring a stack up" in the how-to."""
    section = HOW_TO.read_text().split("\n## Bring a stack up\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "no shell block in the how-to's 'Bring a stack up'"
    return [shlex.split(line, comments=True) for line in block.group(1).splitlines() if line.strip()]


def _config_set(values: dict[str, Any], secrets: set[str], args: list[str]) -> None:
    """`pulumi config set [--secret] [--path] KEY [VALUE]` on a stack's config; a secret without a
    value is prompted for (any value will do here)."""
    secret, path = "--secret" in args, "--path" in args
    rest = [a for a in args if a not in ("--secret", "--path", "--plaintext")]
    key, value = rest[0], rest[1] if len(rest) > 1 else "typed-at-the-prompt"
    full = f"{PROJECT}:{key.split('[', 1)[0] if path else key}"
    if path and (index := re.fullmatch(r"[^\[]+\[(\d+)\]", key)):
        items = json.loads(values.get(full, "[]"))
        items[int(index.group(1)) : int(index.group(1)) + 1] = [value]
        value = json.dumps(items)
    values[full] = value
    if secret:
        secrets.add(full)


def test_the_deploy_walkthrough_works_as_written_on_its_stack():
    commands = [c for c in _walkthrough() if c[:1] == ["pulumi"]]
    (init,) = [c for c in commands if c[1:3] == ["stack", "init"]]
    stack = _stack_file(init[3])
    values, secrets = dict(stack.values), set(stack.secret_keys)
    sets = [c[3:] for c in commands if c[1:3] == ["config", "set"]]
    assert any("--secret" in s for s in sets), "the walkthrough sets no S3 keys"
    for args in sets:
        _config_set(values, secrets, args)
    settings, has_keys = settings_from_raw(values, secrets)
    assert has_keys and not settings.minio_existing_secret and settings.create_namespace
    assert settings.job_nodes == 2 and settings.job_tolerations == ["nvidia.com/gpu:NoSchedule"]


# --- the port the NetworkPolicies open towards MinIO ----------------------------------------


def _s3_port_rules(rendering) -> dict[str, list[dict[str, Any]]]:
    """Per NetworkPolicy, the egress rules towards the MinIO namespace."""
    to_minio = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "minio"}}}
    return {
        p["metadata"]["name"]: [r["ports"] for r in p["spec"]["egress"] if r.get("to") == [to_minio]]
        for p in by_kind(rendering, "NetworkPolicy")
        if p["spec"].get("egress")  # not the namespace's default deny
    }


@pytest.mark.parametrize(
    ("endpoint", "egress", "port"),
    [
        ("minio.minio.svc:9000", None, 9000),  # default: the endpoint's port
        ("minio.minio.svc", None, 80),  # no port, http: 80
        ("minio.minio.svc:80", 9000, 9000),  # Service port 80 -> MinIO pods' 9000
    ],
)
def test_egress_to_minio_opens_the_pods_port_in_both_policies(endpoint, egress, port):
    values = {**S3_SEED, "minioEndpoint": endpoint}
    if egress is not None:
        values["minioEgressPort"] = egress
    rendering = render_config(values, secrets=KEYS)
    rules = _s3_port_rules(rendering)
    assert rules == {
        "ddp-mnist-seed": [[{"protocol": "TCP", "port": port}]],
        "mnist-r1": [[{"protocol": "TCP", "port": port}]],
    }
    env = {
        e["name"]: e.get("value")
        for e in pod_templates(rendering)[0]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    assert env["AWS_ENDPOINT_URL"] == f"http://{endpoint}"  # the client still dials the Service's port


def test_minio_egress_port_out_of_range_is_one_line():
    with pytest.raises(ConfigError) as raised:
        run_program(stack_config({**BASE, **S3_JOB, "minioEgressPort": "70000"}, KEYS))
    assert str(raised.value) == "config ddp-mnist:minioEgressPort=70000 is invalid: must be <= 65535"


def test_the_how_to_gives_port_advice_that_matches_the_keys():
    text = HOW_TO.read_text().split("\n## Isolation and least privilege\n", 1)[1]
    assert "minioEgressPort: 9000" in text and "minio.minio.svc.cluster.local:80" in text
    assert "set\n`minioEndpoint` with port 9000" not in text
    assert Path(ROOT / "Pulumi.yaml").read_text().count("minioEgressPort:") == 1
