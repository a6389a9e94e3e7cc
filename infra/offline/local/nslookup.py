"""`nslookup NAME` for init containers run by the local scheduler: a local stand-in for cluster DNS.

Answers from the scheduler's name map (`$LOCAL_DNS_DIR`, one file per name that currently resolves:
a pod's Service or `<hostname>.<subdomain>` appears once its main container runs, as cluster DNS
publishes it), always with 127.0.0.1. A name with a search-domain suffix (`NAME.ns.svc.cluster.local`)
resolves like NAME. Exit 0 when the name resolves, 1 when it does not, as busybox's nslookup.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def resolves(name: str, names: set[str]) -> bool:
    return any(name == known or name.startswith(f"{known}.") for known in names)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: nslookup NAME", file=sys.stderr)
        return 2
    name = argv[0]
    directory = Path(os.environ.get("LOCAL_DNS_DIR", "."))
    names = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    print("Server:\t\tlocal stand-in for cluster DNS (infra.offline.local)\nAddress:\t127.0.0.1\n")
    if resolves(name, names):
        print(f"Name:\t{name}\nAddress: 127.0.0.1")
        return 0
    print(f"** server can't find {name}: NXDOMAIN")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
