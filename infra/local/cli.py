"""Local scheduler: `python -m infra.local --stack NAME` runs a stack's rendered workloads here.

A development scheduler (like TorchX's local scheduler): it renders the stack exactly as
`infra.review.render` does, derives the pods the controllers create and puts them through the
namespace's admission (`infra.review.cluster`: a pod the API server would refuse is refused here with
the same message), then starts one local process per pod running its init containers and then its own
command, with this project's environment instead of the image. Each gets the env its pod would see,
PVCs map to `.local/<stack>/pvc/<claim>/`, and the job's restart and failure rules are followed.
Kubernetes and the training operator remain the engine on real clusters.

When the stack serves the model (`serveKind: deployment` or `kserve`), the server's pods then run
here too, behind a local stand-in for their Service (`infra.local.serve`): once Ready, the whole
MNIST test set is sent to it over HTTP, its accuracy is checked against the trainer's own metrics.json,
and the server is stopped with SIGTERM (kept running with --keep-serving).

`--cpu` runs a GPU stack's job on CPU with gloo, and `--train-limit N` has the training job's
trainer use only the first N training images: quick wiring checks, each said in one `[local]` line.
`--preempt POD@STEP` (or `POD@SECONDSs`) rehearses a spot node's preemption: at that training step
(the trainer's progress lines) or time, the pod gets SIGTERM, SIGKILL after its
terminationGracePeriodSeconds, and the job kind's controller brings it back as it does a disrupted pod.

The parts: `workloads` (the stack's workloads planned, in dependency order, after admission),
`services` (the S3 stand-in), `adjust` (--cpu, --train-limit, the GPU check), `supervisor` (the pods'
processes) applying `controllers` (restart and failure rules), `stack` (running them in order),
`serve_stack` (the model server and its accuracy check) and this command line.

Exit codes: `EXIT_CODE_MEANINGS` below (`--help` and docs/reference/exit-codes.md list it).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from infra.epilog import exit_codes_epilog
from infra.local.plan import PlanError
from infra.local.preempt import Preemption, parse_preemption
from infra.local.serve import ServeFailed
from infra.local.serve_stack import ServeOptions
from infra.local.stack import run_stack
from infra.local.workloads import PodsRefused
from infra.stackconfig import ROOT, StackNotFound

EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED, EXIT_TERMINATED = 1, 2, 130, 143
# Every exit code of the command and its meaning: `--help` lists them, and docs/reference/exit-codes.md
# is generated from them (python -m infra.reference).
EXIT_CODE_MEANINGS = {
    0: "the job succeeded (and the server, if any, served the trainer's accuracy)",
    EXIT_FAILED: "a workload failed (the seed Job or the training job), the server never got Ready or served "
    "other predictions than the trainer's, or the API server would refuse its pods",
    EXIT_CONFIG: "bad flags, bad stack config, unknown stack, a job that cannot run locally, a `--preempt` "
    "naming no pod of the job, or a local S3 stand-in's bucket that could not be filled with MNIST",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_TERMINATED: "terminated (SIGTERM, as a CI job's timeout sends), after stopping what it started",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM to the command, raised where it is: every pod, server and stand-in it started is then
    stopped on the way out, as at Ctrl-C. Python's default for SIGTERM ends the process at once, and
    they ran on (pods and servers are in sessions of their own, so they never got the signal)."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
    raise Terminated


@contextlib.contextmanager
def _sigterm_stops_the_run() -> Iterator[None]:
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def preemption(text: str) -> Preemption:
    try:
        return parse_preemption(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m infra.local",
        description=__doc__.split("\n\n")[0],
        epilog=exit_codes_epilog(EXIT_CODE_MEANINGS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--stack", required=True, help="stack name: stacks/Pulumi.<stack>.yaml")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=ROOT / ".local",
        help="where volumes live: <workdir>/<stack>/pvc/<claim>/ (default: .local)",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds before the job is failed (default: 1800)"
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="run a GPU stack's job on CPU with gloo and no GPUs, same nodes and processes (a wiring check)",
    )
    parser.add_argument(
        "--train-limit",
        type=at_least_one,
        default=0,
        metavar="N",
        help="the training job's trainer uses only the first N of the 60000 training images (its own "
        "--train-limit; not the seed Job, not the server): a quick wiring check, its accuracy is not the "
        "stack's (default: all)",
    )
    parser.add_argument(
        "--preempt",
        type=preemption,
        action="append",
        default=[],
        metavar="POD@STEP",
        help="preempt a pod of the training job once, as a spot node's shutdown does, at the first "
        "progress line of step >= STEP (add the trainer's --progress-seconds=0 for a line per point) or "
        "at POD@SECONDSs after the job started: SIGTERM, SIGKILL after its terminationGracePeriodSeconds, "
        "then the job kind's restart rule for a disrupted pod (repeatable)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override an env var in every pod (e.g. AWS_ENDPOINT_URL for a local S3)",
    )
    parser.add_argument(
        "--serve-port",
        type=int,
        default=None,
        help="local port of the stand-in for the server's Service (default: the stack's servePort; 0: any)",
    )
    parser.add_argument(
        "--keep-serving",
        action="store_true",
        help="leave the model server running after the served accuracy is checked, until Ctrl-C",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from infra.program.checks import ConfigError
    from infra.program.common.platform_facts import PlatformMismatch

    parser = build_parser()
    args = parser.parse_args(argv)
    bad = [e for e in args.env if "=" not in e]
    if bad:
        parser.error(f"--env {bad[0]!r}: expected KEY=VALUE")
    overrides = dict(e.split("=", 1) for e in args.env)
    try:
        serving = ServeOptions(port=args.serve_port, keep_serving=args.keep_serving)
        with _sigterm_stops_the_run():
            _, result = run_stack(
                args.stack,
                args.workdir,
                args.timeout,
                overrides,
                cpu=args.cpu,
                serving=serving,
                train_limit=args.train_limit,
                preemptions=tuple(args.preempt),
            )
    except ServeFailed as exc:
        print(f"local: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (ConfigError, PlatformMismatch, StackNotFound, PlanError) as exc:
        print(f"local: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except PodsRefused as exc:
        print(
            "\n".join([f"local: {exc}", *(f"local: refused {line}" for line in exc.lines)]), file=sys.stderr
        )
        return EXIT_FAILED
    except Terminated:
        print("local: terminated (SIGTERM): every pod and server it started is stopped", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return 0 if result.succeeded else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
