"""The local cluster: real control plane, KWOK nodes and the operators, on 127.0.0.1.

    python -m infra.localcluster up [--state DIR]      # make cluster-up
    python -m infra.localcluster down [--state DIR]    # make cluster-down
    python -m infra.localcluster status [--state DIR]
    python -m infra.localcluster kueue [--state DIR]   # Kueue v0.19.2 into the running cluster

`up` builds what is missing (infra.localcluster.build), starts everything and prints the
KUBECONFIG to use; `down` stops every process and removes the state directory; `kueue` applies Kueue's
manifests from its pinned module and returns once its webhooks answer (infra.localcluster.kueue).

Exit codes: `EXIT_CODE_MEANINGS` below (`--help` and docs/reference/exit-codes.md list it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.epilog import exit_codes_epilog
from infra.localcluster import kueue
from infra.localcluster.build import EXIT_BUILD_FAILED, EXIT_NO_GO, BuildError, build
from infra.localcluster.cluster import DEFAULT_STATE, ClusterError, State, alive, down, up
from infra.localcluster.node import node

EXIT_NOT_STARTED = 5
EXIT_NOT_RUNNING = 6
EXIT_USAGE = 2  # argparse's
# Every exit code of the command and its meaning: `--help` lists them, and docs/reference/exit-codes.md
# is generated from them (python -m infra.reference).
EXIT_CODE_MEANINGS = {
    0: "done",
    EXIT_USAGE: "bad arguments",
    EXIT_NO_GO: "no Go toolchain (or one too old)",
    EXIT_BUILD_FAILED: "a part failed to build",
    EXIT_NOT_STARTED: "the cluster (or Kueue) did not start: one line says which part; its log is in the "
    "state directory's logs/",
    EXIT_NOT_RUNNING: "`status` or `kueue`: the cluster is not running",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.localcluster",
        description=__doc__.split("\n")[0],
        epilog=exit_codes_epilog(EXIT_CODE_MEANINGS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("up", "down", "status", "kueue"))
    parser.add_argument(
        "--state", type=Path, default=DEFAULT_STATE, help=f"state directory (default {DEFAULT_STATE})"
    )
    args = parser.parse_args(argv)
    state = State(args.state.resolve())
    try:
        if args.command == "up":
            up(state)
        elif args.command == "down":
            node.down(state)  # the real node first, if one joined (no-op otherwise)
            down(state)
        else:
            pids = state.read().get("pids", {})
            dead = [name for name, pid in pids.items() if not alive(pid)]
            if not pids or dead:
                print(f"cluster: not running{' (exited: ' + ', '.join(dead) + ')' if dead else ''}")
                return EXIT_NOT_RUNNING
            if args.command == "kueue":
                build(["kueue"])
                kueue.install(state)
            else:
                print(f"cluster: running, {len(pids)} processes; KUBECONFIG={state.kubeconfig}")
    except BuildError as error:
        print(error, file=sys.stderr)
        return error.code
    except ClusterError as error:
        print(error, file=sys.stderr)
        return EXIT_NOT_STARTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
