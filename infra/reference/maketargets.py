"""docs/reference/make-targets.md: every Makefile target, with its `## ` description."""

from __future__ import annotations

import re

from infra.program.settings import PROJECT_ROOT
from infra.reference.markdown import code, table
from infra.reference.page import header

MAKEFILE = PROJECT_ROOT / "Makefile"
# `name: prerequisites ## description`; file targets (venv markers, paths with '/' or '$') are not commands.
TARGET = re.compile(r"^([A-Za-z][\w-]*):(?!=)([^#\n]*)(?:##\s*(.*))?$", re.MULTILINE)


def targets(text: str | None = None) -> dict[str, str]:
    """Target -> its description ('' when it has none)."""
    found = {}
    for match in TARGET.finditer(MAKEFILE.read_text() if text is None else text):
        found[match.group(1)] = (match.group(3) or "").strip()
    return found


def page() -> str:
    rows = [(code(f"make {name}"), description) for name, description in targets().items()]
    return (
        header("the Makefile's `## ` comments")
        + "\n# Make targets\n\nEvery target of the `Makefile`, in its order. Variables: `STACK` (default "
        "`dev`) picks the stack of `run`, `render` and `rehearse`; `TEST_WORKERS` the test workers; `IMAGE` "
        "and `REGISTRY` the image of `image` and `image-push`.\n\n" + table(("Target", "What it does"), rows)
    )
