"""`python -m infra.localcluster.node up|down [--state DIR]`: the real node of the running local
cluster (node.py says what each does).

Exit codes: `EXIT_CODE_MEANINGS` below (`--help` lists them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.epilog import exit_codes_epilog
from infra.localcluster.build import EXIT_NO_GO, BuildError
from infra.localcluster.cluster import DEFAULT_STATE, State, alive
from infra.localcluster.node.dockerd import ImageError
from infra.localcluster.node.host import HostError
from infra.localcluster.node.node import NodeError, down, up

EXIT_USAGE = 2
EXIT_HOST = 4  # the host cannot run a node: a package missing and not installable, no bridge netfilter
EXIT_NOT_STARTED = 5
EXIT_NOT_RUNNING = 6
EXIT_CODE_MEANINGS = {
    0: "done",
    EXIT_USAGE: "bad arguments",
    EXIT_NO_GO: "no Go toolchain (or one too old)",
    EXIT_HOST: "the host cannot run the node (a Debian package missing, not root, no bridge netfilter), "
    "or a part failed to build",
    EXIT_NOT_STARTED: "the node or an image did not start or build: one line says which; logs are in "
    "the state directory's node/logs/",
    EXIT_NOT_RUNNING: "`up`: no local cluster is running from the state directory",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m infra.localcluster.node",
        description=__doc__.split("\n")[0],
        epilog=exit_codes_epilog(EXIT_CODE_MEANINGS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("up", "down"))
    parser.add_argument(
        "--state", type=Path, default=DEFAULT_STATE, help=f"the cluster's state (default {DEFAULT_STATE})"
    )
    args = parser.parse_args(argv)
    state = State(args.state.resolve())
    try:
        if args.command == "up":
            pids = state.read().get("pids", {})
            if not pids or not all(alive(pid) for pid in pids.values()):
                print(
                    f"node: no local cluster running from {state.directory} (`make cluster-up`)",
                    file=sys.stderr,
                )
                return EXIT_NOT_RUNNING
            up(state)
        else:
            down(state)
    except BuildError as error:
        print(error, file=sys.stderr)
        return error.code
    except HostError as error:
        print(error, file=sys.stderr)
        return EXIT_HOST
    except (NodeError, ImageError) as error:
        print(error, file=sys.stderr)
        return EXIT_NOT_STARTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
