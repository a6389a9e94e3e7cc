"""Secret literals by name and by value, in env, command and args; the names the bundle and common ML
tools use for other things are not taken for secrets. Messages never repeat a value."""

from __future__ import annotations

import guardrails as g
import pytest

from tests.policy.conftest import ALL_STACKS, job_of, stack_objects

CANARY = "canary-Secret-Value-2e9f41"
ENV_FIX = "has a literal value that looks secret; use valueFrom.secretKeyRef"


def _job_with(**container):
    """eks-gpu's Indexed Job, its container's env extended and command or args replaced."""
    job = job_of(stack_objects("eks-gpu"))
    (target,) = job["spec"]["template"]["spec"]["containers"]
    target["env"] += container.pop("env", [])
    target.update(container)
    return job


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("S3_KEY", CANARY),
        ("MINIO_KEY", CANARY),
        ("DB_PASS", CANARY),
        ("MYSQL_PWD", CANARY),
        ("REDIS_AUTH", CANARY),
        ("apiKey", CANARY),
        ("dbPassword", CANARY),
        ("PGPASSWORD", CANARY),
        ("AZURE_STORAGE_CONNECTION_STRING", CANARY),
        ("NGROK_AUTHTOKEN", CANARY),
        ("ENCRYPTION_KEYS", CANARY),
        ("DATABASE_URL", f"postgres://app:{CANARY}@db:5432/runs"),
        ("NOTES", "ghp_" + "a1B2" * 9),
        ("HUB", "hf_" + "Ab3" * 11),
        ("AUTH_HEADER", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2ln"),
    ],
)
def test_secret_literals_under_more_names_and_values_are_reported(name, value):
    job = _job_with(env=[{"name": name, "value": value}])
    assert g.no_secret_literals_in_env(job) == [f"Job mnist-r1: container pytorch env {name} {ENV_FIX}"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("TOKENIZERS_PARALLELISM", "false"),
        ("MAX_TOKENS", "512"),
        ("PARTITION_KEY", "run_id"),
        ("PUBLIC_KEY", "ssh-ed25519 AAAAC3Nza"),
        ("S3_KEY_PREFIX", "runs/"),
        ("KMS_KEY_ID", "alias/training"),
        ("SECRET_NAME", "minio-creds"),
        ("AWS_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:1:secret:x"),
        ("HF_TOKEN_PATH", "/var/run/hf/token"),
        ("PWD", "/workspace"),
        ("DB_PASSWORD", "$(DB_PASSWORD_FROM_SECRET)"),
        ("REQUIRE_AUTH", "true"),
        ("AWS_ENDPOINT_URL", "http://minio.minio.svc.cluster.local:9000"),
    ],
)
def test_names_that_hold_no_secret_are_not_reported(name, value):
    assert g.no_secret_literals_in_env(_job_with(env=[{"name": name, "value": value}])) == []


@pytest.mark.parametrize(
    ("field", "argv", "index"),
    [
        ("args", ["--epochs=3", "--password", CANARY], 2),
        ("args", ["--api-key=" + CANARY, "--epochs=3"], 0),
        ("args", ["--db=postgres://app:" + CANARY + "@db:5432/runs"], 0),
        ("command", ["sh", "-c", f"export AWS_SECRET_ACCESS_KEY={CANARY}; exec python -m trainer"], 2),
        ("command", ["sh", "-c", f"trainer --hf-token {CANARY} --epochs 3"], 2),
        ("args", ["--notes", "AKIACANARY7Q2XWABCDE"], 1),
    ],
)
def test_secret_literals_in_command_and_args_are_reported_by_position(field, argv, index):
    messages = g.no_secret_literals_in_env(_job_with(**{field: argv}))
    assert messages == [
        f"Job mnist-r1: container pytorch {field}[{index}] has a literal value that looks secret; put it in "
        f"a Secret, pass it as an env var (valueFrom.secretKeyRef) and write $(VAR) in {field}"
    ]
    assert CANARY not in "".join(messages)


@pytest.mark.parametrize(
    "argv",
    [
        ["--password-file", "/etc/pw/password"],
        ["--token", "$(HF_TOKEN)"],
        ["--api-key=${API_KEY}"],
        ["--secret-name", "minio-creds", "--token-url=https://auth.example/token"],
        ["sh", "-c", 'echo "node ${PET_NODE_RANK:-?} started"'],
        ["--master-addr=$(PET_MASTER_ADDR)", "--export-to=s3://datasets/mnist/models/mnist-r1"],
    ],
)
def test_references_and_locations_in_args_are_not_reported(argv):
    assert g.no_secret_literals_in_env(_job_with(args=argv)) == []


@pytest.mark.parametrize("stack", ALL_STACKS)
def test_every_stack_renders_no_secret_literal(stack):
    """The bundle's own variables and arguments (PET_*, NCCL_*, OMP_NUM_THREADS, --master-addr=$(...),
    the S3 endpoint, ...) are no secrets."""
    for obj in stack_objects(stack):
        assert g.no_secret_literals_in_env(obj) == [], obj["metadata"]["name"]
