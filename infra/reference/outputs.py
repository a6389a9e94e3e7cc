"""docs/reference/outputs.md: every stack output, from the registry infra/program/common/outputs.py."""

from __future__ import annotations

from infra.program.common.outputs import OUTPUTS
from infra.reference.markdown import code, table
from infra.reference.page import header

INTRO = """\
# Stack outputs

Every output a stack can export (`pulumi stack output`; `pulumi stack output --json` for all), the stack
roles (`stackRole`) that export it, and when. No output holds a secret: the S3 Secrets are named, never
their values. The `*Command` outputs are commands to paste, e.g. `$(pulumi stack output statusCommand)`.
"""


def page() -> str:
    rows = [
        (code(name), output.description, ", ".join(output.roles), output.when or "always")
        for name, output in OUTPUTS.items()
    ]
    return (
        header("infra/program/common/outputs.py")
        + "\n"
        + INTRO
        + "\n## Outputs\n\n"
        + table(("Output", "What it holds", "Roles", "Exported when"), rows)
    )
