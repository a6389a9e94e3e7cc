"""The reference pages generated from the code: `python -m infra.reference [--check]`.

docs/reference/configuration.md (the settings model), outputs.md (infra/program/common/outputs.py), stacks.md
(each shipped stack's rendering),
exit-codes.md (each command's code table), policy.md (the policy pack's rules) and make-targets.md (the
Makefile's `## ` comments) are written from the definitions they describe, the way
`python -m infra.program.schema` writes Pulumi.yaml; `--check` compares without writing, and
tests/docs/test_reference.py runs it, so a page that no longer says what the code does fails the tests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from infra.reference.page import COMMAND, FRONT_MATTER, REFERENCE_DIR, header  # noqa: F401 (the package's names)


def builders() -> dict[str, Callable[[], str]]:
    """Page file name -> the function that writes its text."""
    from infra.reference import configuration, exitcodes, maketargets, outputs, policy, stacks

    return {
        "configuration.md": configuration.page,
        "outputs.md": outputs.page,
        "stacks.md": stacks.page,
        "exit-codes.md": exitcodes.page,
        "policy.md": policy.page,
        "make-targets.md": maketargets.page,
    }


def pages(root: Path = REFERENCE_DIR) -> dict[Path, str]:
    """Every generated page's path and current text."""
    return {root / name: build() for name, build in builders().items()}


def out_of_date(root: Path = REFERENCE_DIR, generated: dict[Path, str] | None = None) -> list[Path]:
    """The pages whose file is missing or differs from what the code generates (`generated`: the
    pages' text for `root`, when already built)."""
    texts = pages(root) if generated is None else generated
    return [path for path, text in texts.items() if not path.is_file() or path.read_text() != text]
