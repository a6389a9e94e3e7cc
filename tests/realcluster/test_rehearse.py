"""The rehearsal's own logic, without a cluster or the CLI (scenario 26, tests/e2e_local/test_rehearse.py,
runs it for real): every stack's values reach the rehearsal's stack file as its own file holds them (lists
stay lists, what the CLI checks against the project's types), secrets apart; `--set` typed by the
project's schema; what the stack expects to find in the cluster, one line each; and a failed command's
own error printed before the one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
from pulumi import automation as auto

from infra.localcluster import rehearse
from infra.localcluster.cluster import State
from infra.localcluster.expected import missing_prerequisites
from infra.localcluster.kube import Client
from infra.localcluster.rehearse import (
    EXIT_FAILED,
    EXIT_MISSING,
    RehearsalConfig,
    rehearsal_config,
    write_stack_file,
)
from infra.program.common import yamlio
from infra.stackconfig import STAND_IN_DIGEST, StackNotFound, project_file, stack_names, stacks_dir

ROOT = Path(__file__).resolve().parents[2]


def missing(config: RehearsalConfig, api: Client, platform_outputs: Any) -> list[str]:
    return missing_prerequisites(config.values(), set(config.secrets), api, platform_outputs)


ON_PREM = ROOT / "tests" / "e2e_local" / "stacks" / "Pulumi.onprem-gpu.yaml"
SCHEMA = project_file()["config"]
PYTHON_TYPES = {"array": list, "integer": int, "boolean": bool, "string": str}
# What the CLI printed for eks-platform before lists reached it as lists (issue 50).
SCHEMA_ERROR = (
    "error: validating stack config: Stack 'eks-platform' with configuration key 'gpuSmokeNodeSelector' "
    "must be of type 'array<string>'"
)


def _file_config(name: str) -> dict[str, Any]:
    return yamlio.load((stacks_dir() / f"Pulumi.{name}.yaml").read_text())["config"]


@pytest.mark.parametrize("name", stack_names())
def test_every_shipped_stacks_values_reach_the_rehearsal_as_written_and_typed_as_the_project_says(name):
    config = rehearsal_config(name, [])
    assert config.name == name
    written = _file_config(name)
    if written.get("ddp-mnist:jobImageDigestRequired"):
        # A stack that requires a digest names the release by tag: the rehearsal stands one in, says so.
        image = f"{written['ddp-mnist:jobImage']}@{STAND_IN_DIGEST}"
        assert config.stand_ins == [f"jobImage {image}"]
        written = {**written, "ddp-mnist:jobImage": image}
        pinned = rehearsal_config(name, [f"jobImage=ghcr.io/ddp-mnist/trainer:0.2.0@sha256:{'e' * 64}"])
        assert pinned.stand_ins == [] and pinned.plain["ddp-mnist:jobImage"].endswith("e" * 64)
    else:
        assert config.stand_ins == []
    assert config.plain == written
    for key, value in config.plain.items():
        declared = SCHEMA[key.split(":", 1)[1]]["type"]
        assert isinstance(value, PYTHON_TYPES[declared]), (key, value, declared)
        if declared == "array":
            assert all(isinstance(item, str) for item in value), (key, value)


def test_eks_platforms_lists_stay_lists_and_its_stack_file_says_so(tmp_path):
    config = rehearsal_config("eks-platform", [])
    assert config.plain["ddp-mnist:gpuSmokeNodeSelector"] == ["node.kubernetes.io/instance-type=g5.12xlarge"]
    assert config.plain["ddp-mnist:priorityClasses"] == ["training-high=100000"]
    assert config.secrets == {} and config.placeholders == []
    written = yamlio.load(write_stack_file(tmp_path, "eks-platform", config.plain).read_text())
    assert written == {"config": _file_config("eks-platform")}


def test_a_job_stacks_unset_s3_keys_become_placeholder_secrets_and_stay_out_of_the_stack_file():
    config = rehearsal_config("dev", [])
    keys = ["ddp-mnist:minioAccessKey", "ddp-mnist:minioSecretKey"]
    assert config.placeholders == keys
    assert config.secrets == {key: f"rehearsal-{key.split(':')[1]}" for key in keys}
    assert not set(keys) & set(config.plain)


def test_the_stack_file_keeps_the_clis_encryption_salt_and_drops_an_earlier_rehearsals_values(tmp_path):
    (tmp_path / "Pulumi.dev.yaml").write_text(
        "encryptionsalt: v1:c2FsdA==:v1:abc\nconfig:\n  ddp-mnist:jobEpochs: '7'\n"
        "  ddp-mnist:minioAccessKey:\n    secure: v1:old\n"
    )
    plain = {"ddp-mnist:jobTolerations": ["nvidia.com/gpu:NoSchedule"], "ddp-mnist:jobNodes": 2}
    written = yamlio.load(write_stack_file(tmp_path, "dev", plain).read_text())
    assert written == {"encryptionsalt": "v1:c2FsdA==:v1:abc", "config": plain}


def test_set_gives_a_list_key_a_list_an_s3_key_a_secret_and_any_other_key_its_string():
    config = rehearsal_config(
        "dev",
        [
            "jobTolerations=[nvidia.com/gpu:NoSchedule, pool=a100:NoExecute]",
            'ddp-mnist:jobNodeSelector=["pool=a100"]',
            "minioAccessKey=AKIA",
            "jobEpochs=3",
        ],
    )
    assert config.plain["ddp-mnist:jobTolerations"] == ["nvidia.com/gpu:NoSchedule", "pool=a100:NoExecute"]
    assert config.plain["ddp-mnist:jobNodeSelector"] == ["pool=a100"]
    assert config.plain["ddp-mnist:jobEpochs"] == "3"
    assert config.secrets["ddp-mnist:minioAccessKey"] == "AKIA"
    assert "ddp-mnist:minioAccessKey" not in config.plain
    assert config.placeholders == ["ddp-mnist:minioSecretKey"]


def test_set_refuses_a_list_key_given_a_plain_value_with_one_line():
    with pytest.raises(ValueError) as refused:
        rehearsal_config("dev", ["jobTolerations=nvidia.com/gpu:NoSchedule"])
    assert str(refused.value) == (
        "--set jobTolerations='nvidia.com/gpu:NoSchedule': jobTolerations is a list, give it as [a, b] "
        "(YAML or JSON)"
    )


def test_a_stack_file_of_yours_is_rehearsed_by_its_path_under_its_own_name():
    config = rehearsal_config(str(ON_PREM), [])
    assert config.name == "onprem-gpu"
    assert config.plain["ddp-mnist:jobTolerations"] == ["nvidia.com/gpu:NoSchedule"]
    assert config.plain["ddp-mnist:minioExistingSecret"] == "minio-training"
    assert config.secrets == {}  # its S3 keys are in the Secret it names, not in its config


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no stack file {path} (a stack of stacks/, or the path of a Pulumi.<name>.yaml)"),
        ("config: [a", "stack file {path} is not valid YAML"),
        ("- a\n", "stack file {path} must hold a `config:` mapping"),
    ],
)
def test_a_stack_file_that_cannot_be_read_is_refused_with_one_line(tmp_path, content, why):
    path = tmp_path / "Pulumi.mine.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(StackNotFound) as refused:
        rehearsal_config(str(path), [])
    assert str(refused.value) == why.format(path=path)


class FakeApi:
    """The API server as `missing_prerequisites` reads it: the objects at these paths exist."""

    def __init__(self, *paths: str) -> None:
        self.paths = set(paths)

    def get(self, path: str) -> dict | None:
        return {"metadata": {}} if path in self.paths else None


def _api(*paths: str) -> Client:
    return cast(Client, FakeApi(*paths))


ON_PREM_MISSING = [
    "Namespace ml-training (createNamespace: false) does not exist",
    "StorageClass rook-cephfs (storageClassName, storageProvider: existing) does not exist",
    "Secret ml-training/minio-training (minioExistingSecret) does not exist",
    "CustomResourceDefinition pytorchjobs.kubeflow.org (the training operator: operatorInstall false) "
    "does not exist",
]
ON_PREM_PATHS = (
    "/api/v1/namespaces/ml-training",
    "/apis/storage.k8s.io/v1/storageclasses/rook-cephfs",
    "/api/v1/namespaces/ml-training/secrets/minio-training",
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org",
)


def test_an_on_prem_stack_names_each_thing_it_expects_that_the_cluster_lacks():
    config = rehearsal_config(str(ON_PREM), [])
    assert missing(config, _api(), lambda name: None) == ON_PREM_MISSING
    assert missing(config, _api(*ON_PREM_PATHS[:2]), lambda name: None) == ON_PREM_MISSING[2:]
    assert missing(config, _api(*ON_PREM_PATHS), lambda name: None) == []


def test_a_job_stack_asks_for_its_platform_stack_first_then_what_that_stack_makes():
    config = rehearsal_config("eks-gpu", [])
    lines = missing(config, _api(), lambda name: None)
    assert lines[0] == (
        "the platform stack eks-platform (platformStack) is not up in this rehearsal's backend: rehearse it "
        "first (make rehearse STACK=eks-platform)"
    )
    assert lines[1:] == [
        "Namespace ddp-mnist (createNamespace: false) does not exist",
        "StorageClass ddp-mnist-efs (storageClassName, storageProvider: existing) does not exist",
        "StorageClass ddp-mnist-efs-data (dataStorageClassName, storageProvider: existing) does not exist",
        "CustomResourceDefinition localqueues.kueue.x-k8s.io (Kueue: jobQueueName) does not exist",
        "ClusterQueue gpu-a10g (jobClusterQueue) does not exist",
        "PriorityClass training-high (jobPriorityClassName) does not exist",
    ]
    up = missing(config, _api(), lambda name: {"platform": {}})
    assert up == lines[1:]


@pytest.mark.parametrize("name", ["dev", "dev-prereqs", "eks-platform", "gke-platform", "aks-platform"])
def test_a_stack_that_makes_what_it_uses_expects_nothing(name):
    config = rehearsal_config(name, [])
    assert missing(config, _api(), lambda stack: None) == []


class FakeStack:
    """A stack whose command `fail` streams `stdout` and `stderr` as the CLI does, then fails with them."""

    def __init__(self, stdout: list[str], stderr: list[str], fail: str = "preview") -> None:
        self.stdout, self.stderr, self.fail = stdout, stderr, fail
        self.workspace = self
        self.secrets: dict[str, auto.ConfigValue] = {}

    def stack_outputs(self, name: str) -> dict:
        return {"platform": {}}

    def _error(self) -> auto.CommandError:
        return auto.CommandError(auto.CommandResult("\n".join(self.stdout), "\n".join(self.stderr), 255))

    def set_all_config(self, config: dict[str, auto.ConfigValue]) -> None:
        if self.fail == "config set":
            raise self._error()
        self.secrets.update(config)

    def preview(self, on_output: Any, on_error: Any, command: str = "preview") -> None:
        if self.fail not in (command, ""):  # "": every command succeeds, the preview streaming its output
            return
        for line in self.stdout:
            on_output(line)
        for line in self.stderr:
            on_error(line)
        if self.fail == command:
            raise self._error()

    def up(self, on_output: Any, on_error: Any, show_secrets: bool) -> None:
        self.preview(on_output, on_error, "up")


def _rehearse(
    tmp_path: Path, monkeypatch, stack: FakeStack, name: str = "eks-platform", up: bool = False
) -> int:
    state = State(tmp_path / "state")
    state.directory.mkdir()
    state.write({"server": "https://127.0.0.1:1", "pids": {}})
    monkeypatch.setattr(rehearse.auto, "create_or_select_stack", lambda **kwargs: stack)
    return rehearse.rehearse(state, rehearsal_config(name, []), {}, up=up)


def test_a_failed_preview_prints_the_engines_own_error_then_one_line_naming_it(tmp_path, monkeypatch, capsys):
    stack = FakeStack(["Previewing update (eks-platform):", ""], [SCHEMA_ERROR])
    assert _rehearse(tmp_path, monkeypatch, stack) == EXIT_FAILED
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "Previewing update (eks-platform):"
    assert err.splitlines() == [
        SCHEMA_ERROR,
        "rehearse: `pulumi preview` of eks-platform failed: validating stack config: Stack 'eks-platform' "
        "with configuration key 'gpuSmokeNodeSelector' must be of type 'array<string>'",
    ]


def test_a_programs_error_in_the_engines_diagnostics_is_the_line_when_stderr_has_none(
    tmp_path, monkeypatch, capsys
):
    # The CLI 3.274.1's output when the program stops `up` (its RunError), on stdout only, exit 1: the
    # program's line first, the engine's own after it.
    why = (
        "PyTorchJob ml-training/mnist-r1 has no pod after 61s and no controller recorded why: is the "
        "controller that runs PyTorchJobs installed and running?"
    )
    stdout = [
        "Updating (onprem-gpu):",
        f" +  pulumi:pulumi:Stack ddp-mnist-onprem-gpu creating (66s) error: {why}",
        " +  pulumi:pulumi:Stack ddp-mnist-onprem-gpu creating (67s) error: an unhandled error occurred: "
        "program exited with non-zero exit code: 1",
        "Diagnostics:",
        "  pulumi:pulumi:Stack (ddp-mnist-onprem-gpu):",
        f"    error: {why}",
        "    error: an unhandled error occurred: program exited with non-zero exit code: 1",
        "Resources:",
        "    + 15 created",
        "    1 errored",
    ]
    assert _rehearse(tmp_path, monkeypatch, FakeStack(stdout, [])) == EXIT_FAILED
    out, err = capsys.readouterr()
    assert out.splitlines() == stdout
    assert err.splitlines() == [
        f"rehearse: `pulumi preview` of eks-platform failed: {why}"
    ]  # FakeStack previews


def test_a_command_that_streams_nothing_still_prints_its_stderr_before_the_line(
    tmp_path, monkeypatch, capsys
):
    stack = FakeStack([], ["error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE"], fail="config set")
    assert _rehearse(tmp_path, monkeypatch, stack, "dev") == EXIT_FAILED
    assert capsys.readouterr().err.splitlines() == [
        "error: passphrase must be set with PULUMI_CONFIG_PASSPHRASE",
        "rehearse: `pulumi config set` of dev failed: passphrase must be set with PULUMI_CONFIG_PASSPHRASE",
    ]


def test_a_failure_without_any_output_says_so_rather_than_see_above(tmp_path, monkeypatch, capsys):
    assert _rehearse(tmp_path, monkeypatch, FakeStack([], [])) == EXIT_FAILED
    assert capsys.readouterr().err.splitlines() == [
        "rehearse: `pulumi preview` of eks-platform failed: the CLI exited 255 without an error message"
    ]


def test_missing_prerequisites_stop_up_before_any_secret_or_preview(tmp_path, monkeypatch, capsys):
    stack = FakeStack([], [])
    monkeypatch.setattr(Client, "get", lambda self, path: None)
    assert _rehearse(tmp_path, monkeypatch, stack, "eks-gpu", up=True) == EXIT_MISSING
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 7 and all(line.startswith("rehearse: missing: ") for line in err[:6])
    assert err[-1] == (
        "rehearse: no `pulumi up` of eks-gpu: it expects 6 thing(s) the cluster lacks (above), which it "
        f"would wait for or fail on: create them (KUBECONFIG={tmp_path / 'state' / 'kubeconfig'} kubectl "
        "...) or rehearse the stack that makes them"
    )
    assert stack.secrets == {}  # stopped before the secrets and the preview


def test_a_preview_still_runs_and_says_what_an_up_would_stop_on(tmp_path, monkeypatch, capsys):
    stack = FakeStack(["Resources:", "    + 25 to create"], [], fail="")
    monkeypatch.setattr(Client, "get", lambda self, path: None)
    assert _rehearse(tmp_path, monkeypatch, stack, "eks-gpu") == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == ["Resources:", "    + 25 to create"]
    assert err.splitlines()[-1].startswith(
        "rehearse: the preview passed; `--up` would stop on the 6 thing(s) above"
    )


def test_the_secrets_are_set_through_the_cli_and_never_written_into_the_stack_file(tmp_path, monkeypatch):
    stack = FakeStack([], [])
    assert _rehearse(tmp_path, monkeypatch, stack, "dev") == EXIT_FAILED  # the fake preview fails
    assert {k: (v.value, v.secret) for k, v in stack.secrets.items()} == {
        "ddp-mnist:minioAccessKey": ("rehearsal-minioAccessKey", True),
        "ddp-mnist:minioSecretKey": ("rehearsal-minioSecretKey", True),
    }
    written = (tmp_path / "state" / "pulumi" / "project" / "Pulumi.dev.yaml").read_text()
    assert "rehearsal-minio" not in written
    assert yamlio.load(written)["config"] == _file_config("dev")


def test_help_lists_every_exit_code(capsys):
    with pytest.raises(SystemExit):
        rehearse.main(["--help"])
    shown = capsys.readouterr().out
    for code, meaning in rehearse.EXIT_CODE_MEANINGS.items():
        assert f"  {code}  {meaning}" in shown
    assert sorted(rehearse.EXIT_CODE_MEANINGS) == [0, 2, 3, 4, 6, 7, 8]


def test_the_rehearsal_engine_saves_its_state_once_per_operation_in_a_backend_of_the_clusters_own(
    tmp_path, monkeypatch
):
    """Checkpoints are skipped only where the state is the throwaway cluster's: the backend under the
    cluster's directory (rehearse.engine_environment says why, BENCHMARKS what it saves)."""
    monkeypatch.setattr(rehearse, "binary", lambda name: tmp_path / "bin" / name)
    monkeypatch.setattr(rehearse, "install_kubernetes_plugin", lambda home, env: None)
    monkeypatch.setenv("PATH", "/usr/bin")  # engine_environment puts the CLI first on this process's PATH
    state = State(tmp_path / "cluster")
    env = rehearse.environment(state)
    assert env["PULUMI_SKIP_CHECKPOINTS"] == "true"
    assert env["PULUMI_BACKEND_URL"] == (state.directory / "pulumi" / "state").as_uri()
    assert env["PATH"].split(":")[0] == str(tmp_path / "bin")
