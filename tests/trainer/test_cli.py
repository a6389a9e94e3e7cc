"""Bad flags: each gives one exact line on stderr and exit code 2; --help documents every flag."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer import errors
from trainer.__main__ import main
from trainer.cli import build_parser, parse_config

HELP = "(see 'python -m trainer --help')"

BAD_FLAGS = [
    (["--epochs=0"], "argument --epochs: must be >= 1, got 0"),
    (["--epochs=two"], "argument --epochs: expected an integer, got 'two'"),
    (["--batch-size=0"], "argument --batch-size: must be >= 1, got 0"),
    (["--lr=-1"], "argument --lr: must be a finite number > 0, got -1"),
    (["--lr=fast"], "argument --lr: expected a number, got 'fast'"),
    (
        ["--scaling=medium"],
        "argument --scaling: invalid choice: 'medium' (choose from 'strong', 'weak')",
    ),
    (
        ["--lr-scaling=cubic"],
        "argument --lr-scaling: invalid choice: 'cubic' (choose from 'none', 'linear', 'sqrt')",
    ),
    (
        ["--backend=mpi"],
        "argument --backend: invalid choice: 'mpi' (choose from 'auto', 'nccl', 'gloo')",
    ),
    (["--checkpoint-every=-1"], "argument --checkpoint-every: must be >= 0, got -1"),
    (["--dist-timeout=0"], "argument --dist-timeout: must be >= 1, got 0"),
    (["--seed=-3"], "argument --seed: must be >= 0, got -3"),
    (["--label-smoothing=1"], "argument --label-smoothing: must be >= 0 and < 1, got 1"),
    (["--label-smoothing=-0.1"], "argument --label-smoothing: must be >= 0 and < 1, got -0.1"),
    (["--label-smoothing=nan"], "argument --label-smoothing: must be >= 0 and < 1, got nan"),
    (
        ["--data=s3:///prefix"],
        "argument --data: 's3:///prefix' names no bucket; use s3://BUCKET/PREFIX",
    ),
    (
        ["--export-to=/models/run-a"],
        "argument --export-to: '/models/run-a' is not an s3:// URL; use s3://BUCKET/PREFIX",
    ),
    (
        ["--export-to=s3:///models/run-a"],
        "argument --export-to: 's3:///models/run-a' names no bucket; use s3://BUCKET/PREFIX",
    ),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_FLAGS, ids=[a[0] for a, _ in BAD_FLAGS])
def test_bad_flag_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert capsys.readouterr().err == f"trainer: usage: {message} {HELP}\n"


@pytest.mark.slow
def test_bad_flag_through_a_real_process(procs: Any) -> None:
    result = procs.run("trainer", ["--epochs=0"])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"trainer: usage: argument --epochs: must be >= 1, got 0 {HELP}"]


def test_help_documents_every_flag() -> None:
    text = build_parser().format_help()
    for flag in (
        "--data",
        "--cache-dir",
        "--checkpoint-dir",
        "--output-dir",
        "--epochs",
        "--batch-size",
        "--scaling",
        "--lr",
        "--lr-scaling",
        "--checkpoint-every",
        "--backend",
        "--seed",
        "--dist-timeout",
        "--train-limit",
        "--weight-decay",
        "--label-smoothing",
        "--export-to",
        "--log-every",
        "--progress-seconds",
        "--tensorboard-dir",
    ):
        assert flag in text


@pytest.mark.slow
def test_help_states_each_default_once(procs: Any) -> None:
    result = procs.run("trainer", ["--help"])
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    flags = [action for action in build_parser()._actions if action.default is not argparse.SUPPRESS]
    assert text.count("(default: ") == len(flags) == 20
    assert "(default: None)" not in text
    assert "where metrics.json and the final model.pt go (default: the checkpoint dir) --epochs" in text
    assert "(default: ./checkpoints)" in text and "(default: ./.cache/mnist)" in text
    assert "epochs to train in total (default: 1)" in text
    assert "the test loss is plain cross-entropy (default: 0.1)" in text


@pytest.mark.slow
def test_help_lists_exactly_the_exit_codes_of_trainer_errors(procs: Any) -> None:
    text = " ".join(procs.run("trainer", ["--help"]).stdout.split())
    listed = re.search(r"Exit codes: (.*)\.$", text)
    assert listed, text
    meanings = dict(entry.split(" ", 1) for entry in listed.group(1).split(", "))
    defined = {
        value for name, value in vars(errors).items() if name.startswith("EXIT_") and isinstance(value, int)
    }
    assert [int(code) for code in meanings] == sorted(defined) == [*range(6), 143, 200, 201, 205, 206, 207]
    assert meanings["5"] == "checkpoint or output directory not writable"
    assert meanings["201"] == "stopped with the job (another pod got SIGTERM); retryable"
    assert meanings["143"] == "SIGTERM: stopped at a checkpointed step; retryable"
    assert meanings["206"] == "master unreachable (python -m trainer.launch); retryable"
    assert meanings["207"] == "model export failed; retryable (the export alone)"
    assert meanings["200"] == "peer lost: another rank died or hung; retryable"


def test_defaults_match_the_documented_fastest_settings() -> None:
    config = parse_config([])
    assert (config.epochs, config.batch_size, config.scaling, config.lr) == (1, 128, "strong", 0.01)
    assert (config.weight_decay, config.label_smoothing) == (5e-4, 0.1)
    assert (config.lr_scaling, config.checkpoint_every, config.backend) == ("none", 1, "auto")
    assert config.output_dir == config.checkpoint_dir == Path("./checkpoints")
    assert config.data == "./data/mnist"
    assert config.cache_dir == Path("./.cache/mnist")
    assert config.export_to is None


@pytest.mark.slow
def test_indivisible_strong_batch_under_torchrun_exits_2(
    procs: Any, mnist_root: Path, tmp_path: Path
) -> None:
    args = [f"--data={mnist_root}", f"--checkpoint-dir={tmp_path}", "--batch-size=255"]
    result = procs.run("trainer.launch", procs.launch_args(2, args))
    assert result.returncode == 2, result.stderr[-2000:]
    expected = (
        "trainer: usage: --batch-size=255 is not divisible by the world size 2 under "
        "--scaling=strong; use a multiple of 2 or --scaling=weak"
    )
    assert expected in result.stderr.splitlines()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_nccl_without_cuda_exits_2(procs: Any, mnist_root: Path, tmp_path: Path) -> None:
    result = procs.run("trainer", [f"--data={mnist_root}", f"--checkpoint-dir={tmp_path}", "--backend=nccl"])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "trainer: usage: --backend=nccl needs a CUDA device and none is visible; use auto or gloo"
    ]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], Path("ck/tensorboard")),
        (["--tensorboard-dir=/runs/tb"], Path("/runs/tb")),
        (["--tensorboard-dir=none"], None),
        (["--tensorboard-dir=None"], None),
    ],
)
def test_tensorboard_dir_defaults_beside_the_checkpoints(argv: list[str], expected: Path | None) -> None:
    assert parse_config(["--checkpoint-dir=ck", *argv]).tensorboard_dir == expected


@pytest.mark.slow
def test_progress_flags_reject_what_they_cannot_use(procs: Any) -> None:
    for flag, value in (("--log-every", "0"), ("--progress-seconds", "-1")):
        result = procs.run("trainer", [f"{flag}={value}"])
        assert result.returncode == 2
        assert result.stderr.startswith(f"trainer: usage: argument {flag}: ")
