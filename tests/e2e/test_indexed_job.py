"""Scenario 4: the Indexed Job stack with `jobWait: false` (submitted through Kueue) is replaced by an
edit without AlreadyExists: the old Job's deletion is awaited before the new one is created."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e import judge, live
from tests.e2e.conftest import destroy
from tests.e2e.project import Backend, program_stack, set_config, up
from tests.e2e.stacks import INDEXED_NAMESPACE, QUEUE, WAIT_S, indexed_config

pytestmark = pytest.mark.e2e

JOB = "mnist-r1"


@pytest.fixture(scope="module")
def indexed(backend: Backend, image: str, s3_keys: tuple[str, str], platform: dict) -> Iterator[dict]:
    config = indexed_config(image, *s3_keys)
    stack = program_stack(backend, "e2e-indexed", config)
    yield {"stack": stack, "config": config}
    destroy(stack, INDEXED_NAMESPACE)


def test_4_an_unawaited_indexed_job_is_replaced_without_already_exists(indexed: dict) -> None:
    stack = indexed["stack"]
    up(stack)
    first = live.get("job", JOB, INDEXED_NAMESPACE)
    assert first["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == QUEUE

    # Edited while the first Job still runs (jobWait: false returned at once): a replacement. The edit
    # is of the pods (a CPU limit), not the schedule, so the new Job resumes the run's checkpoints.
    indexed["config"] = {**indexed["config"], "ddp-mnist:jobCpuLimit": "2"}
    set_config(stack, indexed["config"])
    output: list[str] = []
    up(stack, on_output=output.append)
    assert judge.messages("\n".join(output), "AlreadyExists") == []
    second = live.get("job", JOB, INDEXED_NAMESPACE)
    assert second["metadata"]["uid"] != first["metadata"]["uid"]

    # The replacement runs to the end once Kueue admits it.
    live.wait_for("job", JOB, INDEXED_NAMESPACE, "Complete", WAIT_S)
    assert judge.refused_pod_creations(live.events(INDEXED_NAMESPACE)) == []
