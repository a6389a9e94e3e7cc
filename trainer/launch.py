"""``python -m trainer.launch [--master-wait-timeout=S] -- <torchrun args>``: torchrun for pods.

What it adds to plain torchrun:

1. fails at once (exit 2) if an argument still holds an unexpanded ``$(VAR)`` reference, which
   Kubernetes leaves in place when the variable is missing from the container's environment;
2. on node rank > 0, waits (bounded) until the master's port accepts TCP connections, since an
   Indexed Job's worker pod can start before the master pod exists or listens (exit 206 on timeout);
3. exits with the first failed worker's own exit code (128 + signal if it was killed), where
   torchrun itself would always exit 1, so the trainer's codes reach the podFailurePolicy and the
   training operator's ``ExitCode`` restart policy (200, a lost peer, is retried: see
   :mod:`trainer.peers` for how long a lost or hung peer takes to end the pod);
4. keeps the retry rule of :mod:`trainer.errors` (retryable <=> exit code >= 128) for what torchrun
   itself raises, which would otherwise be a traceback and exit 1 (permanent): a SIGTERM or SIGINT
   that torchrun turns into ``SignalException`` (a preemption, a deleted pod) exits 128 + N once
   torchrun has passed the signal to its ranks and they have exited (on SIGTERM they first stop at an
   agreed step and checkpoint it: :mod:`trainer.preempt`), and a rendezvous that fails or times out
   (a peer that never joined) exits 200 (peer lost);
5. skips torchrun for a finished run (:mod:`trainer.finished`): node rank > 0 exits 0 at once, node
   rank 0 records the restart and retries the model export alone, needing no other rank;
6. starts the ranks of ``-m trainer`` by forking itself once torch and the trainer are imported
   (``--rank-start=fork``, the default), where torchrun would start a new interpreter per rank that
   imports them again: see :func:`forked_rank`. ``--rank-start=exec`` keeps torchrun's own start.
   While it imports torch, a thread reads the dataset the ranks will read, which forked ranks then
   find in memory (:mod:`trainer.read_ahead`);
7. ends a failed run with one line that names the failed rank, its exit code and what that rank said
   (its own one line, left in ``$DDP_MNIST_FATAL_DIR``: :func:`trainer.errors.record_fatal`), where
   torchrun's own report ends with a rule of ``=``. It is the log's last line, which a pod's
   ``FallbackToLogsOnError`` termination message ends with, and which ``pulumi up`` shows.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainer import read_ahead
from trainer.__main__ import exit_process
from trainer.errors import (
    EXIT_CODE_MEANINGS,
    EXIT_INTERNAL,
    EXIT_MASTER_UNREACHABLE,
    EXIT_PEER_LOST,
    EXIT_USAGE,
    FATAL_DIR_ENV,
    REACTION_EXIT_CODES,
    TrainerError,
    recorded_cause,
    recorded_fatal,
    write_line,
)

if TYPE_CHECKING:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
PROGRESS_EVERY_S = 30.0
RETRY_SLEEP_S = 0.5
CONNECT_TIMEOUT_S = 2.0
RANK_STARTS = ("fork", "exec")
PR_SET_NAME = 15  # <linux/prctl.h>
# The signals torchrun's agent handles (torch 2.13 `torch/distributed/elastic/multiprocessing/api.py`,
# PContext.start), which a forked rank would otherwise inherit with the agent's handler.
_AGENT_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class LaunchError(Exception):
    """One line on stderr and an exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def unexpanded_reference(args: Sequence[str]) -> str | None:
    """A one-line message for the first argument with a ``$(NAME)`` left in it, else None."""
    for arg in args:
        match = _REFERENCE.search(arg)
        if match:
            return (
                f"argument '{arg}' references $({match.group(1)}), which is not set in the pod's environment"
            )
    return None


def wait_for_master(
    host: str,
    port: int,
    timeout_s: float,
    report: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    progress_every_s: float = PROGRESS_EVERY_S,
) -> None:
    """Retry a TCP connect (DNS failures included) until it succeeds or ``timeout_s`` passes.

    Reports the wait once, then a short line every ``progress_every_s``; a refused connection is the
    normal state while the master starts, so the error text is shown only if the wait fails.
    """
    start = clock()
    report(f"waiting for master {host}:{port} (up to {timeout_s:g} s)")
    next_report = progress_every_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S):
                report(f"master {host}:{port} is reachable after {clock() - start:.0f} s")
                return
        except OSError as error:
            waited = clock() - start
            if waited >= timeout_s:
                raise LaunchError(
                    f"master {host}:{port} not reachable within --master-wait-timeout="
                    f"{timeout_s:g} s (last error: {error}); is the master pod running?",
                    EXIT_MASTER_UNREACHABLE,
                ) from None
            if waited >= next_report:
                report(f"still waiting for master {host}:{port} ({waited:.0f}/{timeout_s:g} s)")
                next_report = progress_every_s * (waited // progress_every_s + 1)
            sleep(min(RETRY_SLEEP_S, max(0.0, timeout_s - waited)))


def failure_exit_code(exitcode: int) -> int:
    """A worker's exit status as a shell reports it: 128 + N when killed by signal N."""
    if exitcode < 0:
        return 128 + abs(exitcode)
    return exitcode or 1


def root_failure(error: ChildFailedError) -> tuple[int, ProcessFailure]:
    """The worker failure torchrun saw first, as (global rank, failure).

    torchrun stamps failures in whole seconds. When a poll finds a failed rank, it stops the others
    with SIGTERM and records them too, after the ones it found (torch 2.13
    `torch/distributed/elastic/multiprocessing/api.py` SubprocessContext._poll: "log sigterms and
    sigkill exit codes in the self._failures for bookkeeping purposes"). Within one second, then, a
    rank that ended by SIGTERM (unhandled, -15, or the trainer's own stop, 143) was stopped by torchrun
    after the cause; a rank that exited 200 (peer lost) only reacted to another rank's failure (a rank
    SIGKILLed by the OOM killer, say, rather than its neighbour that saw the connection drop). What is
    left ties in torchrun's own order.
    """
    stopped = (-signal.SIGTERM, 128 + signal.SIGTERM)
    return min(
        error.failures.items(),
        key=lambda item: (
            item[1].timestamp,
            item[1].exitcode in stopped,
            item[1].exitcode == EXIT_PEER_LOST,
        ),
    )


def failed_rank(error: ChildFailedError, fatal: Path) -> tuple[int, int]:
    """The rank whose failure ended the run and the launcher's exit code for it.

    :func:`root_failure` among the failures torchrun reports, unless that rank only reacted to another
    (:data:`trainer.errors.REACTION_EXIT_CODES`, or stopped by SIGTERM) and a rank recorded a fault of
    its own in ``fatal`` (:func:`trainer.errors.recorded_cause`) or, forked, was killed by a signal
    torchrun did not send (:func:`signalled_rank`). With forked ranks, torchrun reports
    one failure, the first rank its poll finds ended (torch 2.13 `torch/multiprocessing/spawn.py`
    ProcessContext.join), and a rank that fails takes its peers down within milliseconds (200), well
    inside torchrun's 0.1 s poll: the lowest rank would be named, whichever failed first.
    """
    rank, failure = root_failure(error)
    code = failure_exit_code(failure.exitcode)
    if code in REACTION_EXIT_CODES:
        return recorded_cause(fatal) or signalled_rank() or (rank, code)
    return rank, code


# With forked ranks: each rank's raw exit status (negative: killed by that signal) as the launcher's
# poll found them when torchrun reported a failure, by global rank.
FORKED_EXITS: dict[int, int] = {}


def signalled_rank() -> tuple[int, int] | None:
    """(rank, exit code) of the lowest forked rank killed by a signal torchrun did not send (SIGKILL
    from the OOM killer or a preemption, SIGSEGV, ...: it records nothing), or None. torchrun stops the
    others with SIGTERM only after the failure it reports."""
    killed = sorted(rank for rank, status in FORKED_EXITS.items() if status < 0 and status != -signal.SIGTERM)
    return (killed[0], failure_exit_code(FORKED_EXITS[killed[0]])) if killed else None


def _noting_exits(poll: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """torch 2.13's ``MultiprocessContext._poll``, also noting every forked rank's exit status once a
    failure is reported (``RunProcsResult.failures`` names only the first rank its poll found ended:
    ``torch/multiprocessing/spawn.py`` ProcessContext.join)."""

    def noted(context: Any) -> Any:
        processes = context._pc.processes if context._pc is not None else []
        result = poll(context)
        if result is not None and result.failures:
            for local_rank, process in enumerate(processes):
                if process.exitcode is not None:
                    FORKED_EXITS[int(context.envs[local_rank]["RANK"])] = process.exitcode
        return result

    noted.notes_exits = True  # type: ignore[attr-defined]
    return noted


def _deferring_signals(start: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """torch 2.13's ``MultiprocessContext._start``, with the agent's signals held until every rank is
    forked, then raised again for torchrun's own handlers.

    torchrun's handler raises ``SignalException`` wherever the launcher is. During the fork that is
    inside the at-fork hooks (:func:`_after_fork_in_parent` unblocks the signals), where Python
    prints the exception and drops it: the preemption's SIGTERM was lost, the launcher trained on, and
    the kubelet's SIGKILL came after the grace period with nothing checkpointed. Between two forks
    it left the ranks already forked unknown to the agent (``_pc`` is set once all are), which then
    closed none of them. Here a signal during the start is only noted, and raised once the agent
    knows every rank."""

    def deferred(context: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return start(context)  # handlers can only be set on the main thread; torchrun set none
        noted: list[int] = []
        handlers = {number: signal.signal(number, lambda n, _: noted.append(n)) for number in _AGENT_SIGNALS}
        try:
            return start(context)
        finally:
            for number, handler in handlers.items():
                signal.signal(number, signal.SIG_DFL if handler is None else handler)
            for signum in dict.fromkeys(noted):
                signal.raise_signal(signum)

    deferred.defers_signals = True  # type: ignore[attr-defined]
    return deferred


def exit_code_note(exit_code: int) -> str:
    """`` (SIGKILL)`` for 128 + a signal, the trainer's meaning for its own codes, else nothing."""
    if exit_code in EXIT_CODE_MEANINGS and exit_code > EXIT_INTERNAL:
        return f" ({EXIT_CODE_MEANINGS[exit_code]})"
    if exit_code <= 128:
        return ""
    try:
        return f" ({signal.Signals(exit_code - 128).name})"
    except ValueError:
        return ""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.launch",
        description="torchrun with an unexpanded-$(VAR) check, a bounded wait for the master "
        "on node rank > 0, and the failed worker's exit code preserved.",
        usage="%(prog)s [--rank-start={fork,exec}] [--master-wait-timeout=SECONDS] -- <torchrun arguments>",
    )
    parser.add_argument(
        "--rank-start",
        choices=RANK_STARTS,
        default="fork",
        help="fork: ranks of -m trainer are forked from this process after its imports; "
        "exec: torchrun starts a new interpreter per rank",
    )
    parser.add_argument(
        "--master-wait-timeout",
        type=float,
        default=300.0,
        help="seconds a node with rank > 0 waits for the master's port",
    )
    return parser


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Our own flags before ``--``, torchrun's after it."""
    args = list(argv)
    if "--" not in args:
        return args, []
    cut = args.index("--")
    return args[:cut], args[cut + 1 :]


def report(message: str) -> None:
    write_line(f"launch: {message}")


def finished_run_of(parsed: argparse.Namespace) -> int | None:
    """The exit code of a finished run's node, concluded without torchrun; None to run torchrun."""
    from trainer.finished import conclude, finished_run, trainer_config

    nnodes, nproc = str(parsed.nnodes), str(parsed.nproc_per_node)
    if not (nnodes.isdigit() and nproc.isdigit()):  # an elastic range or "auto": not ours
        return None
    config = trainer_config(parsed.module, parsed.training_script, parsed.training_script_args)
    world_size = int(nnodes) * int(nproc)
    run = None if config is None else finished_run(config, world_size)
    if run is None:
        return None
    try:
        conclude(run, int(parsed.node_rank), world_size, report)
    except TrainerError as error:
        write_line(error.one_line("launch"))
        return error.exit_code
    return 0


def forks_ranks(parsed: argparse.Namespace, rank_start: str) -> bool:
    """Whether the ranks are forked: ``--rank-start=fork``, torchrun runs ``-m trainer``, and the count
    of ranks per node is a number. ``--nproc-per-node=gpu`` (or ``auto``) makes torchrun's agent ask
    CUDA for the device count, and a process forked after CUDA's initialization cannot use CUDA."""
    return (
        rank_start == "fork"
        and str(parsed.nproc_per_node).isdigit()
        and bool(parsed.module)
        and not (parsed.no_python or parsed.run_path)
        and parsed.training_script == "trainer"
    )


# torch answers ``torch.cuda.is_available()`` and ``device_count()`` from NVML when this is "1", without
# initializing CUDA (torch 2.13 `torch/cuda/__init__.py`: ``_nvml_based_avail``, ``device_count``).
NVML_CHECK_ENV = "PYTORCH_NVML_BASED_CUDA_CHECK"


def cuda_untouched_by_fork(torch_cuda: Any = None, load_driver: Callable[[], object] | None = None) -> bool:
    """Whether ranks forked from this process can still use CUDA.

    torchrun's ``LaunchConfig.__post_init__`` asks ``torch.cuda.is_available()`` in the launcher (torch
    2.13 `torch/distributed/launcher/api.py`, for its default NUMA binding). By default torch answers
    with CUDA's own device count (``torch._C._cuda_getDeviceCount``), which initializes CUDA in this
    process and marks every child forked after it as unable to use CUDA: the rank's
    ``torch.cuda.set_device`` raises "Cannot re-initialize CUDA in forked subprocess"
    (``torch/csrc/cuda/Module.cpp``, ``poison_fork``). With :data:`NVML_CHECK_ENV` set, torch asks NVML
    instead and leaves CUDA alone, but only where NVML can count the devices
    (``torch.cuda._device_count_nvml() >= 0``); where it cannot, torch falls back to CUDA's count.

    True for torch without CUDA, where NVML answers, and where no CUDA driver can be loaded (a CPU
    node: CUDA is initialized by nobody). False where a driver loads but NVML does not answer: the
    ranks must then start as new interpreters (``--rank-start=exec``'s start).
    """
    if torch_cuda is None:
        import torch

        if torch.version.cuda is None:
            return True
        torch_cuda = torch.cuda
    if torch_cuda._device_count_nvml() >= 0:
        return True
    try:
        (load_driver or _load_cuda_driver)()
    except OSError:
        return True
    return False


def _load_cuda_driver() -> object:
    """The CUDA driver's library, loaded without initializing it (no ``cuInit``); OSError if absent."""
    return ctypes.CDLL("libcuda.so.1")


def _before_fork() -> None:
    # Output buffered in this process would be written again by each child.
    sys.stdout.flush()
    sys.stderr.flush()
    signal.pthread_sigmask(signal.SIG_BLOCK, _AGENT_SIGNALS)


def _after_fork_in_parent() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _AGENT_SIGNALS)


def _after_fork_in_child() -> None:
    # A new interpreter's handlers, set while the signals are still blocked: a SIGTERM the agent
    # sends at once then ends the rank as it would end a rank torchrun had started (-15, retryable),
    # never through the agent's handler, which would raise in the rank. The trainer installs its own
    # (trainer.preempt) when it starts.
    for number in _AGENT_SIGNALS:
        signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _AGENT_SIGNALS)


def _name_process(name: str) -> None:
    """Set this process's name (Linux ``prctl(PR_SET_NAME)``, at most 15 bytes); elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


class _OneLineFailures(logging.Filter):
    """Drops the traceback torchrun logs with a forked rank's failure ("failed (exitcode: N) local_rank:
    ...", torch 2.13 MultiprocessContext._poll): it is torch's own ``ProcessExitedException``, not the
    rank's; the rank has said its cause, and the launcher's last line repeats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("failed (exitcode"):
            record.exc_info, record.exc_text = None, None
        return True


def forked_rank(*argv: str) -> None:
    """One rank of ``-m trainer``, forked from the launcher: the trainer as ``python -u -m trainer``.

    The launcher has imported torch (torchrun's agent needs it) and the trainer before the fork, so a
    rank starts with both in memory (copy-on-write) instead of importing them again: seconds per rank
    on a CPU, more with torch's CUDA build. torchrun runs a function entry point in a
    ``multiprocessing`` child (torch 2.13 `torch/distributed/elastic/multiprocessing/api.py`
    MultiprocessContext, ``start_method="fork"``), which sets the rank's environment first. Here:

    - the OpenMP thread count is set from ``OMP_NUM_THREADS``, which the OpenMP runtime read when the
      launcher imported torch, before torchrun set it;
    - output is line-buffered, as ``-u`` leaves each line on the log when it is written;
    - the process is named ``trainer-r<RANK>`` (``ps``, ``/proc/PID/comm``), since its command line and
      ``/proc/PID/environ`` are the launcher's;
    - a failed run ends the process with the trainer's code at once (:func:`trainer.__main__.exit_process`);
      a finished one returns, which is how torchrun learns that a rank succeeded. torchrun's wrapper
      then waits until the launcher has read every rank's result (``_wrap``:
      ``queue_finished_reading_event.wait()``); should another rank fail meanwhile (rank 0's export,
      say), the launcher ends this one with SIGTERM. SIGTERM is made fatal again first: the
      trainer's handler (:mod:`trainer.preempt`) only records it, which kept a finished rank, and the
      pod, until the SIGKILL ``--shutdown-timeout`` (30 s) later. A SIGTERM it recorded after the
      last agreement (the run's last steps, evaluation or export: the agent closing the ranks for a
      preemption) ends it the same way, once its results are written.
    """
    import torch

    from trainer import preempt
    from trainer.__main__ import exit_code, exit_process

    _name_process(f"trainer-r{os.environ.get('RANK', '')}")
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    code = exit_code(list(argv))
    if code:
        exit_process(code)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    if preempt.REQUEST.requested:  # came after the last agreement: the agent is closing the ranks
        signal.raise_signal(signal.SIGTERM)


def fork_config(parsed: argparse.Namespace) -> tuple[Any, list[str]]:
    """torchrun's launch config for ``parsed`` and the rank's command (``["-u", "-m", "trainer", ...]``),
    built with torch's NVML device check, so that building it leaves CUDA uninitialized in this
    process (:func:`cuda_untouched_by_fork`)."""
    from torch.distributed.run import config_from_args

    before = os.environ.get(NVML_CHECK_ENV)
    os.environ[NVML_CHECK_ENV] = "1"
    try:
        config, _python, command_args = config_from_args(parsed)
    finally:
        _restore_env(NVML_CHECK_ENV, before)
    return config, list(command_args)


def _restore_env(key: str, value: str | None) -> None:
    """``key`` in this process's environment as it was (``value``; None: unset)."""
    if value is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = value


def run_torchrun(parsed: argparse.Namespace, fork: bool, ahead: read_ahead.ReadAhead | None = None) -> None:
    """torchrun's ``run(parsed)``; with ``fork``, the ranks are :func:`forked_rank` children, forked
    once ``ahead`` (the dataset's read, :mod:`trainer.read_ahead`) has ended.

    What torch 2.13's ``torch.distributed.run.run`` does, but the entry point: for one node with no
    master port, a c10d rendezvous on a free local port; otherwise the port defaults to 29500.
    """
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import parse_min_max_nnodes, run

    if not fork:
        run(parsed)
        return
    import trainer.train  # noqa: F401  (in memory before the fork, like torch)

    if parsed.standalone or (
        parsed.rdzv_backend == "static"
        and not parsed.rdzv_endpoint
        and parsed.master_port is None
        and parse_min_max_nnodes(parsed.nnodes)[1] == 1
    ):
        parsed.rdzv_backend, parsed.rdzv_endpoint = "c10d", "localhost:0"
        parsed.rdzv_id = str(uuid.uuid4())
    if parsed.master_port is None:
        parsed.master_port = 29500
    config, command_args = fork_config(parsed)
    config.start_method = "fork"
    from torch.distributed.elastic.multiprocessing.api import MultiprocessContext

    FORKED_EXITS.clear()
    if not getattr(MultiprocessContext._poll, "notes_exits", False):
        setattr(MultiprocessContext, "_poll", _noting_exits(MultiprocessContext._poll))  # noqa: B010
    if not getattr(MultiprocessContext._start, "defers_signals", False):
        setattr(MultiprocessContext, "_start", _deferring_signals(MultiprocessContext._start))  # noqa: B010
    logging.getLogger("torch.distributed.elastic.multiprocessing.api").addFilter(_OneLineFailures())
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
    )
    if ahead is not None:
        ahead.wait()
    elastic_launch(config=config, entrypoint=forked_rank)(*command_args[3:])


def launch(argv: Sequence[str]) -> int:
    own, torchrun_args = split_argv(argv)
    options = build_parser().parse_args(own)
    problem = unexpanded_reference(torchrun_args)
    if problem:
        raise LaunchError(problem, EXIT_USAGE)
    if not torchrun_args:
        raise LaunchError("no torchrun arguments after '--'", EXIT_USAGE)
    # Reads the dataset while torch is imported below: ranks forked later find it in memory.
    ahead = read_ahead.start(torchrun_args) if options.rank_start == "fork" else None
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args

    parsed = parse_args(torchrun_args)
    finished = finished_run_of(parsed)
    if finished is not None:
        return finished
    if int(parsed.node_rank) > 0 and parsed.rdzv_backend == "static":
        port = int(parsed.master_port) if parsed.master_port is not None else 29500
        wait_for_master(parsed.master_addr, port, options.master_wait_timeout, report)
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.rendezvous.api import RendezvousError

    # The launcher's own directory, removed when it ends: the ranks' fatal-error records and, unless
    # --log-dir names one, torchrun's log directory with its per-rank error files (torchrun's default,
    # a new torchelastic_* directory in the temp directory, outlived every run).
    scratch = Path(tempfile.mkdtemp(prefix="launch-"))
    fatal = scratch / "fatal"
    fatal.mkdir()
    if not parsed.log_dir:
        parsed.log_dir = str(scratch / "torchelastic")
    fatal_dir_before = os.environ.get(FATAL_DIR_ENV)
    os.environ[FATAL_DIR_ENV] = str(fatal)  # the workers' environment is a copy of ours
    try:
        fork = forks_ranks(parsed, options.rank_start)
        if fork and not cuda_untouched_by_fork():
            report(
                "ranks start as new interpreters: a CUDA driver is present but NVML cannot count its "
                "devices, so torchrun would initialize CUDA here and a forked rank could not use it"
            )
            fork = False
        run_torchrun(parsed, fork, ahead)
    except SignalException as error:
        code = 128 + int(error.sigval)
        report(f"torchrun stopped by {signal.Signals(error.sigval).name}: exit code {code} (retryable)")
        return code
    except (RendezvousError, DistError) as error:
        text = " ".join(str(error).split()) or type(error).__name__
        report(f"rendezvous failed: {type(error).__name__}: {text}; exit code {EXIT_PEER_LOST} (peer lost)")
        return EXIT_PEER_LOST
    except ChildFailedError as error:
        write_line(str(error))
        rank, code = failed_rank(error, fatal)
        said = recorded_fatal(fatal, rank)
        said = f": {said}" if said else ""
        report(f"worker rank {rank} failed with exit code {code}{exit_code_note(code)}{said}")
        return code
    finally:
        _restore_env(FATAL_DIR_ENV, fatal_dir_before)  # for a caller in this process (the tests)
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return launch(sys.argv[1:] if argv is None else argv)
    except LaunchError as error:
        write_line(f"launch: {error}")
        return error.exit_code


if __name__ == "__main__":
    # By the time main() returns, torchrun's agent has reaped every worker (on SIGTERM after they
    # stopped and checkpointed: trainer.preempt) and nothing is left to write; the interpreter's
    # teardown of the torch the launcher imported took about 1.9 s of the pod's grace period on the
    # 2-rank CPU run, which exit_process (os._exit) skips.
    exit_process(main())
