"""A canary secret set in config never leaves the Secret object: not in YAML, outputs, logs or output."""

from __future__ import annotations

import logging

import pytest

from infra.review.cluster import cluster_view, effective_yaml
from infra.review.manifest import REDACTED, RecordingMocks, render, to_yaml
from infra.review.summary import summary
from tests.infra.conftest import BASE, by_kind, stack_config

CANARY_ID = "AKIACANARY7Q2XW"
CANARY_KEY = "canary-Secret-Value-9f8e7d"


def test_canary_never_leaves_the_secret(capsys, caplog):
    caplog.set_level(logging.DEBUG)
    mocks = RecordingMocks()
    config = stack_config(
        {**BASE, "jobDataSource": "s3", "minioEndpoint": "minio.minio.svc:9000", "namespaceGpuQuota": 4},
        secrets={"minioAccessKey": CANARY_ID, "minioSecretKey": CANARY_KEY},
    )
    rendering = render(config, mocks)
    view = cluster_view(rendering.objects, rendering.settings)
    text = to_yaml(rendering) + summary(rendering, view) + repr(rendering.outputs) + repr(rendering.objects)
    text += effective_yaml(view, "test")  # the effective pods reference the Secret, never hold it
    print(summary(rendering, view))
    captured = capsys.readouterr()
    for canary in (CANARY_ID, CANARY_KEY):
        assert canary not in text
        assert canary not in captured.out + captured.err
        assert canary not in caplog.text
    # The Secret really carries the values, and as Pulumi secrets (not just redacted by the renderer).
    (secret,) = [r for r in mocks.registrations if r.type == "kubernetes:core/v1:Secret"]
    string_data = secret.inputs["stringData"]
    assert "4dabf18193072939515e22adb298388d" in string_data  # Pulumi's secret marker
    assert string_data["value"] == {"AWS_ACCESS_KEY_ID": CANARY_ID, "AWS_SECRET_ACCESS_KEY": CANARY_KEY}
    (obj,) = [o for o in rendering.objects if o["kind"] == "Secret"]
    assert obj["stringData"] == {"AWS_ACCESS_KEY_ID": REDACTED, "AWS_SECRET_ACCESS_KEY": REDACTED}
    # Only the Secret object holds them: every other registration is free of both values, the job's
    # ServiceAccount, NetworkPolicy (which names the S3 endpoint) and namespace budget included.
    assert {"ServiceAccount", "NetworkPolicy", "ResourceQuota"} <= {o["kind"] for o in rendering.objects}
    others = repr([r.inputs for r in mocks.registrations if r is not secret])
    assert CANARY_ID not in others and CANARY_KEY not in others


def test_values_set_as_secrets_are_never_echoed_in_errors():
    """A typo in a secret key, or a secret value of the wrong shape, names the key, never the value."""
    from infra.program.checks import ConfigError
    from infra.review.manifest import run_program

    cases = [
        ({"minioSecretkey": CANARY_KEY}, "minioSecretkey"),  # misspelled key, set with --secret
        ({"jobNodeSelector": CANARY_KEY}, "jobNodeSelector"),  # not a list
        ({"jobNodes": CANARY_KEY}, "jobNodes"),  # not an integer
    ]
    for secrets, key in cases:
        try:
            run_program(stack_config(dict(BASE), secrets=secrets))
        except ConfigError as exc:
            assert f"config ddp-mnist:{key}=[secret] is invalid" in str(exc)
            assert CANARY_KEY not in str(exc)
        else:
            raise AssertionError(f"{key} was accepted")


@pytest.mark.parametrize("key", ["minioSecretkey", "minioAccesskey", "s3Password", "apiToken"])
def test_a_misspelt_credential_key_set_in_plain_text_is_never_echoed(key):
    """`pulumi config set minioSecretkey VALUE` (a typo, no --secret) still holds a credential."""
    from infra.program.checks import ConfigError
    from infra.review.manifest import run_program

    with pytest.raises(ConfigError) as caught:
        run_program(stack_config({**BASE, key: CANARY_KEY}))
    assert str(caught.value).startswith(f"config ddp-mnist:{key}=[secret] is invalid: must be a key")
    assert CANARY_KEY not in str(caught.value)


def test_empty_key_pair_from_the_schema_defaults_means_unset():
    rendering = render(stack_config({**BASE, "minioAccessKey": "", "minioSecretKey": ""}))
    assert [o for o in rendering.objects if o["kind"] == "Secret"] == []


def test_a_key_other_than_the_credentials_set_as_secret_is_refused_without_echoing_it():
    """Config is read raw: a secret minioEndpoint would reach the pods' env, state and outputs in plain
    text. It is refused, naming the key, before anything is registered."""
    from infra.program.checks import ConfigError
    from infra.review.manifest import run_program

    for key, value in (("minioEndpoint", f"{CANARY_KEY}.example.com:9000"), ("jobNodes", "2")):
        mocks = RecordingMocks()
        try:
            run_program(stack_config(dict(BASE), secrets={key: value}), mocks)
        except ConfigError as exc:
            assert str(exc) == (
                f"config ddp-mnist:{key}=[secret] is invalid: must be set without --secret: only the S3 "
                "key pairs (minioAccessKey/minioSecretKey, minioReadAccessKey/minioReadSecretKey) are "
                "kept secret, and this key's value is written in "
                f"plain text to the rendered objects, Pulumi state and outputs (pulumi config set {key} "
                "<value>; for credentials use minioAccessKey/minioSecretKey or minioExistingSecret)"
            )
            assert mocks.registrations == []
        else:
            raise AssertionError(f"a secret {key} was accepted")


READ_KEYS = {"minioReadAccessKey": "reader-key", "minioReadSecretKey": "reader-secret-0123"}
RW_KEYS = {"minioAccessKey": "writer-key", "minioSecretKey": "writer-secret-0123"}


def _secret_refs(template: dict) -> set[str]:
    return {
        e["valueFrom"]["secretKeyRef"]["name"]
        for c in template["spec"]["containers"]
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def test_the_pods_that_only_read_take_the_read_only_pair_and_the_trainer_the_read_write_one():
    values = {
        **BASE,
        "minioEndpoint": "minio.minio.svc:9000",
        "seedSource": "s3",
        "jobModelExport": True,
        "serveKind": "deployment",
        "serveModelSource": "s3",
        "jobWait": True,
    }
    rendering = render(stack_config(values, secrets={**RW_KEYS, **READ_KEYS}))
    secrets = {s["metadata"]["name"]: s for s in by_kind(rendering, "Secret")}
    assert set(secrets) == {"ddp-mnist-s3", "ddp-mnist-s3-read"}
    assert rendering.outputs["s3ReadSecretName"] == "ddp-mnist-s3-read"
    (seed,) = [j for j in by_kind(rendering, "Job") if j["metadata"]["name"] == "ddp-mnist-seed"]
    assert _secret_refs(seed["spec"]["template"]) == {"ddp-mnist-s3-read"}
    (server,) = by_kind(rendering, "Deployment")
    assert _secret_refs(server["spec"]["template"]) == {"ddp-mnist-s3-read"}
    (job,) = by_kind(rendering, "PyTorchJob")
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        assert _secret_refs(replica["template"]) == {"ddp-mnist-s3"}  # it exports the model
    # Without a read-only pair every pod uses the one Secret.
    single = render(stack_config(values, secrets=RW_KEYS))
    assert [s["metadata"]["name"] for s in by_kind(single, "Secret")] == ["ddp-mnist-s3"]
    assert single.outputs["s3ReadSecretName"] == "ddp-mnist-s3"


@pytest.mark.parametrize(
    ("secrets", "plain", "message"),
    [
        (
            {**RW_KEYS, "minioReadAccessKey": "reader-key"},
            {},
            "config ddp-mnist:minioReadSecretKey=(unset) is invalid: must be set too: minioReadAccessKey and "
            "minioReadSecretKey go together",
        ),
        (
            READ_KEYS,
            {},
            "config ddp-mnist:minioReadAccessKey=[secret] is invalid: must be set only beside minioAccessKey "
            "and minioSecretKey",
        ),
        (
            {**RW_KEYS, **READ_KEYS},
            {"createNamespace": False, "minioReadExistingSecret": "s3-reader"},
            "config ddp-mnist:minioReadExistingSecret=s3-reader is invalid: must be empty when "
            "minioReadAccessKey and minioReadSecretKey are set",
        ),
        (
            RW_KEYS,
            {"minioReadExistingSecret": "s3-reader"},
            "config ddp-mnist:minioReadExistingSecret=s3-reader is invalid: must be empty when "
            "createNamespace is true",
        ),
    ],
)
def test_a_half_or_doubled_read_only_pair_is_refused_with_the_key(secrets, plain, message):
    from infra.program.checks import ConfigError
    from infra.program.common.config import settings_from_raw

    stack = stack_config({**BASE, "minioEndpoint": "minio.minio.svc:9000", **plain}, secrets=secrets)
    with pytest.raises(ConfigError) as raised:
        settings_from_raw(stack.values, set(stack.secret_keys))
    assert str(raised.value).startswith(message)
    for value in secrets.values():
        assert value not in str(raised.value)


READERS = {
    **BASE,
    "minioEndpoint": "minio.minio.svc:9000",
    "seedSource": "s3",
    "jobModelExport": True,
    "serveKind": "deployment",
    "serveModelSource": "s3",
    "jobWait": True,
    "minioReadKeysRequired": True,
}


def test_read_keys_required_refuses_a_stack_whose_readers_would_hold_the_read_write_keys():
    from infra.program.checks import ConfigError
    from infra.program.common.config import settings_from_raw

    stack = stack_config(READERS, secrets=RW_KEYS)
    with pytest.raises(ConfigError) as raised:
        settings_from_raw(stack.values, set(stack.secret_keys))
    assert str(raised.value) == (
        "config ddp-mnist:minioReadAccessKey=(unset) is invalid: must be set (with minioReadSecretKey, both "
        "--secret) or minioReadExistingSecret given when minioReadKeysRequired is true: the seed Job "
        "(seedSource s3) and the model server (serveModelSource s3) only read the store"
    )
    for value in RW_KEYS.values():
        assert value not in str(raised.value)
    # Either read-only source satisfies it; so does a stack with no pod that only reads.
    settings_from_raw(*_raw(stack_config(READERS, secrets={**RW_KEYS, **READ_KEYS})))
    existing = {**READERS, "createNamespace": False, "minioReadExistingSecret": "s3-reader"}
    settings_from_raw(*_raw(stack_config(existing, secrets=RW_KEYS)))
    no_readers = {**READERS, "seedSource": "https", "serveModelSource": "pvc"}
    settings_from_raw(*_raw(stack_config(no_readers, secrets=RW_KEYS)))


def _raw(stack) -> tuple[dict, set]:
    return stack.values, set(stack.secret_keys)


def test_the_shipped_stacks_with_readers_require_the_read_only_pair():
    """Every shipped job stack with a pod that only reads asks for the read-only pair, so its seed or
    server never holds the keys that can write (docs/how-to/write-a-stack.md)."""
    from infra.program.common.config import read_only_pods, settings_from_raw
    from infra.stackconfig import load_stack, stack_names

    asked = {}
    for name in stack_names():
        stack = load_stack(name)
        settings, _ = settings_from_raw(stack.values, set(stack.secret_keys))
        if settings.stack_role == "job" and read_only_pods(settings):
            asked[name] = settings.minio_read_keys_required
    assert asked == {"eks-gpu": True, "gke-gpu": True}
