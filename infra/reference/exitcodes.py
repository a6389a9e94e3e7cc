"""docs/reference/exit-codes.md: every exit code of each command, from the table in its module."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from infra.reference.markdown import cell, code, slug, table
from infra.reference.page import header


@dataclass(frozen=True)
class Command:
    title: str  # the heading, whose slug is the anchor other pages link to
    run: str  # how it is run
    module: str  # the module holding its table
    table: str  # the table's name in that module
    what: str


COMMANDS = (
    Command(
        "Trainer",
        "python -m trainer",
        "trainer.errors",
        "EXIT_CODE_MEANINGS",
        "The training process on each rank (`python -m trainer.launch` ends with its ranks' code).",
    ),
    Command(
        "Seed",
        "python -m trainer.seed",
        "trainer.seed",
        "EXIT_CODES",
        "The seed Job's container: fills the data volume with verified MNIST.",
    ),
    Command(
        "Model server",
        "python -m trainer.serve",
        "trainer.serve.cli",
        "EXIT_CODE_MEANINGS",
        "The model server's container (Deployment or KServe predictor).",
    ),
    Command(
        "Render",
        "python -m infra.review.render",
        "infra.review.render",
        "EXIT_CODE_MEANINGS",
        "The offline render (`make render`).",
    ),
    Command(
        "Local run",
        "python -m infra.local",
        "infra.local.cli",
        "EXIT_CODE_MEANINGS",
        "The local scheduler (`make run`).",
    ),
    Command(
        "Local cluster",
        "python -m infra.localcluster",
        "infra.localcluster.__main__",
        "EXIT_CODE_MEANINGS",
        "The local cluster tool (`make cluster-up`, `make cluster-down`).",
    ),
    Command(
        "Rehearse",
        "python -m infra.localcluster.rehearse",
        "infra.localcluster.rehearse",
        "EXIT_CODE_MEANINGS",
        "A real preview and up of a stack against the local cluster (`make rehearse`).",
    ),
    Command(
        "Real node",
        "python -m infra.localcluster.node",
        "infra.localcluster.node.__main__",
        "EXIT_CODE_MEANINGS",
        "The local cluster's real kubelet node (`make node-up`; `make cluster-down` stops it).",
    ),
    Command(
        "Reference",
        "python -m infra.reference",
        "infra.reference.__main__",
        "EXIT_CODE_MEANINGS",
        "This reference's generator (`make reference`).",
    ),
)


def meanings(command: Command) -> dict[int, str]:
    return dict(getattr(importlib.import_module(command.module), command.table))


INTRO = """\
# Exit codes

Every exit code of each command this project ships, with its meaning; each command's `--help` lists
the same table. A pod's exit code is what Kubernetes and the job's restart rules act on: the trainer's
1-127 fail the job at once, its codes from 128 are retried with a new pod (see the trainer's table).
"""


def page() -> str:
    parts = [header("each command's exit-code table (`EXIT_CODE_MEANINGS`, the seed's `EXIT_CODES`)"), INTRO]
    for command in COMMANDS:
        rows = [(code(number), meaning) for number, meaning in sorted(meanings(command).items())]
        parts.append(
            f"## {command.title}\n\n{code(command.run)}: {cell(command.what)} Table: "
            f"`{command.module}.{command.table}`.\n\n{table(('Exit code', 'Meaning'), rows)}"
        )
    return "\n".join(parts)


def anchors() -> list[str]:
    return [slug(command.title) for command in COMMANDS]
