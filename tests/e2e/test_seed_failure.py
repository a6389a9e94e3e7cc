"""Scenario 5: a seed that fails (a wrong bucket) ends `pulumi up` with one line; after fixing the
config, the next up succeeds without `--replace` (the seed Job is replaced because it is not Complete)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pulumi import automation as auto

from tests.e2e import judge, live
from tests.e2e.conftest import destroy
from tests.e2e.fixtures.cluster import BUCKET
from tests.e2e.project import Backend, program_stack, set_config, up
from tests.e2e.stacks import SEED_NAMESPACE, seed_config

pytestmark = pytest.mark.e2e

SEED = "ddp-mnist-seed"


@pytest.fixture(scope="module")
def seeded(backend: Backend, image: str, s3_keys: tuple[str, str], platform: dict) -> Iterator[dict]:
    config = seed_config(image, *s3_keys, bucket="mnist-missing")
    stack = program_stack(backend, "e2e-seed", config)
    yield {"stack": stack, "config": config, "keys": s3_keys, "image": image}
    destroy(stack, SEED_NAMESPACE)


def test_5_a_failed_seed_fails_up_with_one_line_and_a_fixed_config_succeeds(seeded: dict) -> None:
    stack = seeded["stack"]
    with pytest.raises(auto.CommandError) as failed:
        up(stack)
    lines = judge.messages(str(failed.value), rf"Job {SEED} failed")
    assert len(lines) == 1, lines
    assert judge.job_condition(live.get("job", SEED, SEED_NAMESPACE)) == "Failed"
    assert not live.exists("pytorchjob", "mnist-r1", SEED_NAMESPACE)

    seeded["config"] = {**seeded["config"], "ddp-mnist:minioBucket": BUCKET}
    set_config(stack, seeded["config"])
    assert up(stack)["seedOutcome"] == "Complete"  # no --replace
    assert judge.job_condition(live.get("job", SEED, SEED_NAMESPACE)) == "Complete"
    assert live.exists("pytorchjob", "mnist-r1", SEED_NAMESPACE)
    assert judge.refused_pod_creations(live.events(SEED_NAMESPACE)) == []
