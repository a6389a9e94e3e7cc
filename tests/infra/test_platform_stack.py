"""A job stack that names its platform stack (`platformStack`) takes that stack's facts instead of its own
declarations, and is refused with one line naming both stacks when they disagree."""

from __future__ import annotations

from typing import Any

import pytest

from infra.program.checks import ConfigError
from infra.program.common import platform_facts as platform
from infra.program.common.config import settings_from_raw
from infra.program.common.platform_facts import PlatformMismatch
from infra.program.settings import Settings
from infra.review.manifest import render
from tests.infra.conftest import BASE, PLATFORM_STACKS, render_config, shipped, stack_config

JOB = {**BASE, "stackRole": "job", "operatorInstall": False, "jobWait": True}


def settings_of(values: dict[str, Any]) -> tuple[Settings, bool]:
    stack = stack_config(values)
    return settings_from_raw(stack.values, set(stack.secret_keys))


def facts_of(**values: Any) -> dict[str, Any]:
    found = platform.facts(settings_of({"stackRole": "platform", "operatorInstall": False, **values})[0])
    assert found is not None
    return found


OPERATOR_ONLY = {"operatorInstall": True}
EVERYTHING = {
    "operatorInstall": True,
    "trainerInstall": True,
    "allowBothOperators": True,
    "kserveInstall": True,
}


def take(job: dict[str, Any], found: Any) -> Settings:
    settings, has_keys = settings_of({**JOB, "platformStack": "acme/ddp-mnist/plat", **job})
    return platform.take(settings, found, "team-a", has_keys)


@pytest.mark.parametrize("stack", PLATFORM_STACKS)
def test_every_shipped_platform_stack_exports_what_its_config_installs(stack):
    rendering = shipped(stack)
    found = rendering.outputs[platform.OUTPUT]
    settings = rendering.settings
    assert found["schema"] == platform.SCHEMA
    assert (found["operator"] is not None) == settings.operator_install
    assert (found["trainer"] or {}).get("version") == (
        settings.trainer_version if settings.trainer_install else None
    )
    assert (found["kserve"] or {}).get("version") == (
        settings.kserve_version if settings.kserve_install else None
    )
    if settings.operator_install:
        assert found["operator"]["initContainerImage"] == settings.operator_init_container_image


def test_a_job_stack_exports_no_facts_and_an_all_stack_exports_its_own():
    job = {**JOB, "operatorInitContainerRestricted": True}
    assert platform.OUTPUT not in render_config(job).outputs
    assert render_config({}).outputs[platform.OUTPUT]["operator"]["version"] == "v1.9.4"


def test_unset_declarations_are_taken_from_the_facts():
    taken = take({"jobNodes": 2, "serveKind": "kserve"}, facts_of(**EVERYTHING))
    assert taken.operator_init_container_restricted is True
    assert taken.kserve_present is True and taken.trainer_present is True
    image = "registry.internal/alpine:3.20@sha256:" + "a" * 64
    mirrored = take({}, facts_of(**OPERATOR_ONLY, operatorInitContainerImage=image))
    assert mirrored.operator_init_container_image == image


def test_without_a_platform_stack_the_declarations_stand_as_written():
    settings, _ = settings_of({**JOB, "operatorInitContainerRestricted": True, "jobNodes": 2})
    assert settings.platform_stack == "" and settings.operator_init_container_restricted is True
    with pytest.raises(ConfigError, match="operatorInitContainerRestricted"):
        settings_of({**JOB, "jobNodes": 2})  # restricted namespace, Workers, nothing declared


def test_rules_that_need_the_facts_wait_for_them():
    # Refused without platformStack (above); with one, the facts decide.
    settings, _ = settings_of({**JOB, "jobNodes": 2, "platformStack": "plat"})
    assert settings.operator_init_container_restricted is False  # not yet taken
    with pytest.raises(PlatformMismatch, match="installed no training operator"):
        platform.take(settings, facts_of(trainerInstall=True), "team-a", False)


@pytest.mark.parametrize(
    ("job", "installs", "message"),
    [
        (
            {"kservePresent": True, "serveKind": "deployment"},
            OPERATOR_ONLY,
            "declares kservePresent=true, but",
        ),
        ({"trainerPresent": True, "jobKind": "indexed-job"}, OPERATOR_ONLY, "declares trainerPresent=true"),
        (
            {"operatorInitContainerImage": "registry.internal/alpine:3.20@sha256:" + "b" * 64},
            OPERATOR_ONLY,
            "declares operatorInitContainerImage=registry.internal/alpine:3.20@sha256:bbbb",
        ),
    ],
)
def test_a_declaration_the_facts_contradict_is_refused_naming_both_stacks(job, installs, message):
    with pytest.raises(PlatformMismatch) as caught:
        take(job, facts_of(**installs))
    line = str(caught.value)
    assert message in line and "stack team-a" in line and "platform stack acme/ddp-mnist/plat" in line
    assert "\n" not in line


def test_an_equal_declaration_is_accepted():
    assert take({"kservePresent": True, "serveKind": "kserve"}, facts_of(**EVERYTHING)).kserve_present


def test_a_declaration_at_its_default_is_no_declaration():
    """The engine hands the program every key of Pulumi.yaml, defaults included: `false` written out
    cannot be told from unset, so the facts decide."""
    taken = take({"kservePresent": False, "operatorInitContainerRestricted": False}, facts_of(**EVERYTHING))
    assert taken.kserve_present and taken.operator_init_container_restricted


@pytest.mark.parametrize(
    ("job", "installs", "message"),
    [
        ({"jobKind": "pytorchjob"}, {"trainerInstall": True}, "installed no training operator"),
        ({"jobKind": "trainjob"}, OPERATOR_ONLY, "installed no Kubeflow Trainer v2"),
        ({"serveKind": "kserve"}, OPERATOR_ONLY, "installed no KServe"),
        (
            {"jobQueueName": "team", "jobClusterQueue": "gpu"},
            OPERATOR_ONLY,
            "declares kueuePyTorchJobIntegration false",
        ),
        (
            {"jobKind": "trainjob", "jobQueueName": "team", "jobClusterQueue": "gpu"},
            {
                "trainerInstall": True,
                "trainerVersion": "v2.1.0",
                "trainerSource": "/srv/mirror/trainer-v2.1.0/manifests/overlays/manager",
            },
            "Trainer v2.1.0: Kueue manages TrainJobs from Trainer v2.2.0",
        ),
    ],
)
def test_a_job_needing_what_the_platform_did_not_install_is_refused(job, installs, message):
    with pytest.raises(PlatformMismatch, match=message):
        take(job, facts_of(**installs))


def test_what_the_platform_team_declares_of_kueue_reaches_the_job_stack():
    queued = {"jobQueueName": "team", "jobClusterQueue": "gpu"}
    taken = take(queued, facts_of(**OPERATOR_ONLY, kueuePyTorchJobIntegration=True))
    assert taken.kueue_pytorchjob_integration is True
    trainjob = {**queued, "jobKind": "trainjob"}
    assert take(trainjob, facts_of(trainerInstall=True, trainerVersion="v2.3.0")).trainer_present


@pytest.mark.parametrize("found", [None, {}, {"schema": 2}, "text"])
def test_a_stack_without_facts_is_refused(found):
    with pytest.raises(PlatformMismatch, match="exports no 'platform' output of schema 1"):
        take({}, found)


def test_platform_stack_is_for_job_stacks_and_a_stack_reference():
    with pytest.raises(
        ConfigError, match="platformStack=plat is invalid: must be empty when stackRole is all"
    ):
        settings_of({**BASE, "platformStack": "plat"})
    with pytest.raises(ConfigError, match="platformStack=a/b is invalid: must be a stack reference"):
        settings_of({**JOB, "platformStack": "a/b"})


def test_offline_tools_read_the_platform_stack_from_its_file():
    rendering = shipped("gke-gpu")
    assert rendering.settings.platform_stack == "gke-platform"
    assert rendering.settings.kserve_present and rendering.settings.operator_init_container_restricted
    with pytest.raises(PlatformMismatch, match="no stack 'nowhere'"):
        render(stack_config({**JOB, "platformStack": "nowhere"}))
    with pytest.raises(PlatformMismatch, match="offline, only a stack of project ddp-mnist"):
        render(stack_config({**JOB, "platformStack": "acme/other/gke-platform"}))
    with pytest.raises(PlatformMismatch, match="installed no KServe"):
        render(stack_config({**JOB, "platformStack": "aks-platform", "serveKind": "kserve"}))


def test_a_platform_stack_that_patches_kubeflows_operator_exports_it_restricted():
    found = facts_of(operatorPatchExisting=True)
    assert found["operator"] == {
        "version": "",
        "initContainerImage": Settings.model_fields["operator_init_container_image"].default,
        "initContainerRestricted": True,
        "patched": "kubeflow/training-operator",
    }
    assert take({"jobNodes": 2}, found).operator_init_container_restricted is True


def test_what_a_platform_declares_present_it_exports_without_a_version():
    found = facts_of(operatorPatchExisting=True, trainerPresent=True, kservePresent=True)
    assert found["trainer"] == {"version": "", "progress": False} and found["kserve"] == {"version": ""}
    queued = {"jobKind": "trainjob", "jobQueueName": "team", "jobClusterQueue": "gpu", "serveKind": "kserve"}
    taken = take(queued, found)  # an unknown version is not held against the job
    assert taken.trainer_present and taken.kserve_present


def test_a_job_names_a_priority_class_its_platform_creates_or_is_refused():
    found = facts_of(priorityClasses=["training-high=100000", "batch-low=10"])
    assert found["priorityClasses"] == ["batch-low", "training-high"]
    indexed = {"jobKind": "indexed-job"}
    taken = take({**indexed, "jobPriorityClassName": "training-high"}, found)
    assert taken.job_priority_class_name == "training-high"
    with pytest.raises(
        PlatformMismatch, match="creates no such PriorityClass \\(it creates: batch-low, training-high\\)"
    ):
        take({**indexed, "jobPriorityClassName": "urgent"}, found)


def test_a_platform_stack_creates_its_priority_classes():
    rendering = render_config(
        {"stackRole": "platform", "operatorInstall": False, "priorityClasses": ["training-high=100000"]}
    )
    (created,) = [o for o in rendering.objects if o["kind"] == "PriorityClass"]
    assert (created["metadata"]["name"], created["value"], created["globalDefault"]) == (
        "training-high",
        100000,
        False,
    )


@pytest.mark.parametrize(
    "entry", ["training-high", "training-high=x", "system-high=1", "training-high=1000000001", "Bad_Name=1"]
)
def test_a_priority_class_entry_is_a_user_definable_name_and_value(entry):
    with pytest.raises(ConfigError, match="priorityClasses=.* is invalid: must be name=value entries"):
        settings_of({"stackRole": "platform", "operatorInstall": False, "priorityClasses": [entry]})


def test_only_a_platform_or_all_stack_creates_priority_classes():
    with pytest.raises(
        ConfigError, match="priorityClasses=.* is invalid: must be empty when stackRole is job"
    ):
        settings_of({**JOB, "jobKind": "indexed-job", "priorityClasses": ["training-high=1"]})
