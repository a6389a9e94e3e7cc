"""`getent hosts NAME` and `nslookup NAME` for init containers run by the local scheduler: a local
stand-in for cluster DNS.

Answers from the scheduler's name map (`$LOCAL_DNS_DIR`, one file per name that currently resolves:
a pod's Service or `<hostname>.<subdomain>` appears once its main container runs, as cluster DNS
publishes it), always with 127.0.0.1. A name with a search-domain suffix (`NAME.ns.svc.cluster.local`)
resolves like NAME. Exit statuses are those of the real tools: `getent hosts` (alpine's musl-utils,
`main/musl/getent.c`) exits 0 when the name resolves and 2 when it does not (1 for bad usage), the
operator's restricted init container runs it; `nslookup` (busybox) exits 0 or 1, upstream's template
runs it.

Usage: `python -m infra.local.dns getent hosts NAME` or `... dns nslookup NAME`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

GETENT_NOT_FOUND = 2
GETENT_USAGE = 1


def resolves(name: str, names: set[str]) -> bool:
    return any(name == known or name.startswith(f"{known}.") for known in names)


def published_names() -> set[str]:
    directory = Path(os.environ.get("LOCAL_DNS_DIR", "."))
    return {p.name for p in directory.iterdir()} if directory.is_dir() else set()


def getent(argv: list[str]) -> int:
    """`getent hosts NAME`: one line `127.0.0.1  NAME` and 0, or nothing and 2."""
    if len(argv) != 2 or argv[0] != "hosts":
        print("Usage: getent hosts NAME (the local stand-in knows the hosts database only)", file=sys.stderr)
        return GETENT_USAGE
    name = argv[1]
    if not resolves(name, published_names()):
        return GETENT_NOT_FOUND
    print(f"{'127.0.0.1':<16}  {name}")
    return 0


def nslookup(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: nslookup NAME", file=sys.stderr)
        return 2
    name = argv[0]
    print("Server:\t\tlocal stand-in for cluster DNS (infra.local)\nAddress:\t127.0.0.1\n")
    if resolves(name, published_names()):
        print(f"Name:\t{name}\nAddress: 127.0.0.1")
        return 0
    print(f"** server can't find {name}: NXDOMAIN")
    return 1


COMMANDS = {"getent": getent, "nslookup": nslookup}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m infra.local.dns {{{'|'.join(COMMANDS)}}} ARGS", file=sys.stderr)
        return 2
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
