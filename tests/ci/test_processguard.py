"""The quick tests' contract (tests/processguard.py): which commands run the project's own code, and
the audit hook that fails a quick test starting one."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests.conftest import pytest_ignore_collect
from tests.processguard import ROOT, project_process


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        ([sys.executable, "-m", "trainer", "--help"], "python -m trainer"),
        (["python3", "-X", "importtime", "-m", "infra.review.render"], "python -m infra.review.render"),
        (["python", "-c", "import sys, infra.review.render as r"], "python -c '... import infra ...'"),
        (["python3.11", "-c", "from torch import nn"], "python -c '... import torch ...'"),
        (["/usr/bin/python3", "-u", str(ROOT / "policy")], f"python {ROOT / 'policy'}"),
        (["python", "bench/bench_trainer.py"], "python bench/bench_trainer.py"),
    ],
)
def test_the_projects_own_code_in_a_process_is_named(argv: list[str], reason: str) -> None:
    assert project_process(None, argv) == reason


@pytest.mark.parametrize(
    "argv",
    [
        [sys.executable, "-c", "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)", "counter"],
        [sys.executable, "-I", "-S", "-c", "import signal, time; time.sleep(1)"],
        ["kubectl", "label", "--local", "-f", "pod.yaml"],
        ["openssl", "genrsa", "2048"],
        ["sh", "-c", "python -m trainer"],  # a shell's command line is not looked into
        [sys.executable, "-m", "json.tool"],
        ["/usr/bin/python3", "/usr/lib/python3/dist-packages/x.py"],
    ],
)
def test_tools_and_stand_ins_are_allowed(argv: list[str]) -> None:
    assert project_process(None, argv) is None


def test_a_quick_test_that_starts_the_trainer_fails_before_it_starts() -> None:
    with pytest.raises(RuntimeError, match=r"is not marked slow but starts `python -m trainer` in a process"):
        subprocess.run([sys.executable, "-m", "trainer", "--help"], capture_output=True, check=False)


@pytest.mark.slow
def test_a_slow_test_may_start_it() -> None:
    result = subprocess.run([sys.executable, "-m", "trainer", "--help"], capture_output=True, check=False)
    assert result.returncode == 0


@pytest.mark.parametrize(
    ("markexpr", "ignored"),
    [("not slow", True), ("", False), ("slow", False), ("not slow and not e2e", True)],
)
def test_a_module_all_slow_is_not_imported_by_a_run_that_leaves_slow_out(tmp_path, markexpr, ignored) -> None:
    module = tmp_path / "test_all_slow.py"
    module.write_text("import pytest\n\npytestmark = pytest.mark.slow  # real processes\n")
    config = SimpleNamespace(option=SimpleNamespace(markexpr=markexpr))
    assert bool(pytest_ignore_collect(module, config)) is ignored  # type: ignore[arg-type]
    module.write_text("import pytest\n\n\n@pytest.mark.slow\ndef test_one():\n    pass\n")
    assert not pytest_ignore_collect(module, config)  # type: ignore[arg-type]
