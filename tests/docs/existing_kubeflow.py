"""The kubectl recipe of docs/EXISTING-KUBEFLOW.md, read from the page: the partial Deployment it applies
and the undo command (what tests/docs checks against the code and the local cluster tier runs)."""

from __future__ import annotations

import re
from typing import Any

from infra.program.common import yamlio
from infra.stackconfig import ROOT

DOC = ROOT / "docs" / "EXISTING-KUBEFLOW.md"
PATCH_MARKER = "<!-- operator-patch:"
UNDO_MARKER = "<!-- operator-patch-undo -->"


def _block_after(marker: str) -> str:
    text = DOC.read_text()
    start = text.index(marker)
    match = re.compile(r"```\w*\n(.*?)```", re.DOTALL).search(text, start)
    assert match, f"no code block after {marker} in {DOC.name}"
    return match.group(1)


def recipe_patch() -> dict[str, Any]:
    """The partial Deployment the page tells a team to apply."""
    return dict(yamlio.load(_block_after(PATCH_MARKER)))


def recipe_undo() -> tuple[str, dict[str, Any]]:
    """The undo: its `kubectl ...` command line and the object it applies (the heredoc)."""
    command, _, rest = _block_after(UNDO_MARKER).partition(" <<'YAML'\n")
    body = rest.rsplit("YAML", 1)[0]
    return command.strip(), dict(yamlio.load(body))
