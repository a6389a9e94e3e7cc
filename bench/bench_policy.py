"""How long the policy pack takes to judge a platform stack, fed over the analyzer protocol as the
engine feeds it during `pulumi preview --policy-pack policy`.

    python bench/bench_policy.py [--stack gke-platform] [--rounds 2]

Starts the pack as the CLI does (`python policy`, its analyzer server), then sends one ``Analyze``
request per resource of the stack's offline rendering (its own objects and the upstream manifests it
applies, CRDs with their whole schemas, as a preview sends them) and one ``AnalyzeStack`` with all of
them, and prints the seconds each took, the slowest resources first. A script that prints, never a
timed test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))


def resources(stack: str) -> list[tuple[str, str, dict]]:
    """(type token, URN, object) for every Kubernetes object the stack registers or applies."""
    from tests.infra.conftest import shared_shipped
    from tests.policy.conftest import resources_of

    rendering = shared_shipped(stack)
    whole = {(item.type, item.name): item.obj for install in rendering.upstream for item in install.objects}
    found = []
    for urn, obj in resources_of(rendering):
        qualified, name = urn.split("::")[2:4]
        obj = whole.get((qualified.rsplit("$", 1)[-1], name), obj)
        api = obj["apiVersion"] if "/" in obj["apiVersion"] else f"core/{obj['apiVersion']}"
        found.append((f"kubernetes:{api}:{obj['kind']}", urn, obj))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stack", default="gke-platform")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    import grpc
    from google.protobuf import empty_pb2, struct_pb2
    from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

    items = resources(args.stack)
    requests = []
    for type_, urn, obj in items:
        props = struct_pb2.Struct()
        props.update(obj)
        requests.append(
            analyzer_pb2.AnalyzeRequest(type=type_, properties=props, urn=urn, name=urn.rsplit("::", 1)[-1])
        )
    size = sum(request.ByteSize() for request in requests)
    print(f"{args.stack}: {len(requests)} resources, {size / 2**20:.1f} MiB of properties", flush=True)
    server = subprocess.Popen(
        [str(REPO_ROOT / "policy" / ".venv" / "bin" / "python"), "-u", str(REPO_ROOT / "policy")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 1 << 30)]
        )
        stub = analyzer_pb2_grpc.AnalyzerStub(channel)
        stub.GetAnalyzerInfo(empty_pb2.Empty(), timeout=60)
        for round_ in range(1, args.rounds + 1):
            timed = []
            started = time.perf_counter()
            for request in requests:
                clock = time.perf_counter()
                stub.Analyze(request, timeout=600)
                timed.append(
                    (time.perf_counter() - clock, request.urn.rsplit("::", 1)[-1], request.ByteSize())
                )
            analyze = time.perf_counter() - started
            clock = time.perf_counter()
            stack = analyzer_pb2.AnalyzeStackRequest(
                resources=[
                    analyzer_pb2.AnalyzerResource(
                        type=r.type, properties=r.properties, urn=r.urn, name=r.name
                    )
                    for r in requests
                ]
            )
            stub.AnalyzeStack(stack, timeout=600)
            whole = time.perf_counter() - clock
            print(
                f"round {round_}: Analyze, all resources {analyze:.2f} s; AnalyzeStack {whole:.2f} s",
                flush=True,
            )
        for seconds, name, size in sorted(timed, reverse=True)[:8]:
            print(f"  {seconds:7.3f} s  {size / 1024:8.0f} KiB  {name}")
    finally:
        server.kill()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
