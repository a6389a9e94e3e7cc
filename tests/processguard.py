"""The quick tests' contract, checked as they run: a test that starts the project's own code in a process
(the trainer, a launcher, a server, a CLI of `infra/`, the policy pack, pytest) is marked `slow`, so
`make test-fast` never pays an interpreter's imports of torch, Pulumi or the project.

Small stand-ins (a pod that is `python -c "import os, sys; ..."` counting its runs) and other tools
(kubectl, openssl, linters) are allowed: they import nothing of the project. `tests/conftest.py` installs
the check as an audit hook (`subprocess.Popen` is audited, PEP 578); a quick test that breaks the
contract fails with one line naming the command.

What it does not see: a shell's command line (`sh -c "python -m trainer"` is a shell), and a process a
background thread starts after its own test has ended (it is charged to the test then running).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The top-level packages whose import is the cost: the project's and the heavy ones it runs.
PROJECT_PACKAGES = ("infra", "trainer", "tests", "policy", "torch", "pytest", "pulumi", "pulumi_policy")
_INTERPRETER = re.compile(r"python(\d+(\.\d+)?)?")
_FROM = re.compile(r"\bfrom\s+([\w.]+)\s+import\b")
_IMPORT = re.compile(r"\bimport\s+([\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*)")


def _imported(code: str) -> list[str]:
    """The top-level packages a `python -c` program names in its import statements."""
    names = [m.group(1) for m in _FROM.finditer(code)]
    for m in _IMPORT.finditer(code):
        names += [part.split()[0] for part in m.group(1).split(",")]
    return [name.split(".")[0] for name in names]


def _words(args: object) -> list[str]:
    if isinstance(args, str | bytes | os.PathLike):
        return [os.fsdecode(args)]
    if isinstance(args, Sequence):
        return [os.fsdecode(a) for a in args if isinstance(a, str | bytes | os.PathLike)]
    return []


def project_process(executable: object, args: object) -> str | None:
    """The reason a command runs the project's own code ("python -m infra.review.render"), or None for a
    tool or a stand-in that imports none of it."""
    argv = _words(args)
    program = os.fsdecode(executable) if isinstance(executable, str | bytes | os.PathLike) else ""
    program = program or (argv[0] if argv else "")
    if not _INTERPRETER.fullmatch(Path(program).name):
        return None
    rest = argv[1:]
    skip = False
    for i, word in enumerate(rest):
        if skip:
            skip = False
            continue
        if word in ("-X", "-W"):
            skip = True
            continue
        if word == "-m" and i + 1 < len(rest):
            module = rest[i + 1]
            return f"python -m {module}" if module.split(".")[0] in PROJECT_PACKAGES else None
        if word == "-c" and i + 1 < len(rest):
            found = [name for name in _imported(rest[i + 1]) if name in PROJECT_PACKAGES]
            return f"python -c '... import {found[0]} ...'" if found else None
        if word.startswith("-"):
            continue
        script = Path(word)
        inside = script.is_absolute() and script.resolve().is_relative_to(ROOT)
        return f"python {word}" if inside or not script.is_absolute() else None
    return None
