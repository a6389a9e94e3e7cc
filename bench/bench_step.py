"""Where one CPU rank's training step goes: compute by operation, and the gradient all-reduce.

    python bench/bench_step.py --data ../shared/data/mnist [--batch 64] [--steps 100] [--warmup 20]
        [--ranks 2]

With ``--ranks 1`` (the default) it runs the trainer's step (``trainer.model``, ``trainer.data``'s
normalisation, cross-entropy with the default label smoothing, ``trainer.optim.AdamW``) in this
process on one thread, ``--batch`` images per step, and prints milliseconds per step, then
``torch.profiler``'s table of the operations by their own CPU time, grouped by input shape, with
the convolutions' GFLOP/s. With ``--ranks N`` it starts N processes (gloo on 127.0.0.1, one thread
each) that time, per step, the same compute and then one of: nothing, the trainer's gradient
average (``trainer.dist.average_gradients``, one all-reduce) or a bare barrier; each row is one rank.
The ``--warmup`` steps before them are not counted. A script that prints, never a timed test.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
os.environ["OMP_NUM_THREADS"] = "1"

COMMS = ("none", "average_gradients", "barrier")


def make_step(data_root: Path, batch: int, steps: int, warmup: int, seed: int):  # type: ignore[no-untyped-def]
    """The trainer's step and ``warmup + steps`` batches of indices for it."""
    import torch
    from torch import nn

    from trainer.cli import parse_config
    from trainer.data import load_mnist, normalise
    from trainer.model import build_model
    from trainer.optim import AdamW

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    config = parse_config([])
    data = load_mnist(data_root, torch.device("cpu"))
    model = build_model(torch.device("cpu"))
    optimizer = AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    order = torch.randperm(len(data.train_y))
    batches = order[: (warmup + steps) * batch].reshape(warmup + steps, batch)

    def compute(indices: torch.Tensor) -> None:
        logits = model(normalise(data.train_x[indices]))
        loss = nn.functional.cross_entropy(
            logits, data.train_y[indices], label_smoothing=config.label_smoothing
        )
        optimizer.zero_grad()
        loss.backward()

    return compute, optimizer, batches


def one_process(args: argparse.Namespace) -> None:
    from torch.profiler import ProfilerActivity, profile

    compute, optimizer, batches = make_step(args.data, args.batch, args.steps, args.warmup, seed=0)
    for indices in batches[: args.warmup]:
        compute(indices)
        optimizer.step()
    start = time.perf_counter()
    for indices in batches[args.warmup :]:
        compute(indices)
        optimizer.step()
    per_step = (time.perf_counter() - start) / args.steps
    print(
        f"1 process, 1 thread, batch {args.batch}: {per_step * 1e3:.2f} ms/step, "
        f"{per_step / args.batch * 1e6:.1f} us/sample (over {args.steps} steps)"
    )
    profiled = batches[args.warmup : args.warmup + min(args.steps, 50)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True) as prof:
        for indices in profiled:
            compute(indices)
            optimizer.step()
    rows = sorted(
        prof.key_averages(group_by_input_shape=True), key=lambda e: e.self_cpu_time_total, reverse=True
    )
    total = sum(e.self_cpu_time_total for e in rows)
    steps = len(profiled)
    print(f"\nprofiled {steps} steps: {total / steps / 1e3:.2f} ms/step of CPU; by operation and input shape")
    print(f"{'ms/step':>8} {'share':>6}  operation  (first input's shape)")
    for event in rows[: args.top]:
        shape = event.input_shapes[0] if event.input_shapes else ""
        print(
            f"{event.self_cpu_time_total / steps / 1e3:8.3f} {event.self_cpu_time_total / total:6.1%}  "
            f"{event.key}  {shape}"
        )
    print("\nthe convolutions and the linear layer, forward only (the profiler counts no FLOPs for backward)")
    for event in rows:
        if event.flops and event.cpu_time_total and event.key in ("aten::conv2d", "aten::addmm", "aten::mm"):
            rate = event.flops / (event.cpu_time_total / 1e6) / 1e9
            print(
                f"{event.cpu_time_total / steps / 1e3:8.3f} ms/step {rate:6.1f} GFLOP/s  "
                f"{event.key}  {event.input_shapes[0]}"
            )


def rank_main(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    import torch.distributed as dist

    from trainer.dist import average_gradients

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    compute, optimizer, batches = make_step(args.data, args.batch, args.steps, args.warmup, seed=rank)
    comms = {
        "none": lambda: None,
        "average_gradients": lambda: average_gradients(optimizer.params),
        "barrier": dist.barrier,
    }
    lines = []
    for name in COMMS:
        comm = comms[name]
        busy = waited = 0.0
        for index, indices in enumerate(batches):
            began = time.perf_counter()
            compute(indices)
            computed = time.perf_counter()
            comm()
            communicated = time.perf_counter()
            optimizer.step()
            if index >= args.warmup:
                busy += computed - began + time.perf_counter() - communicated
                waited += communicated - computed
        lines.append(
            f"rank {rank}, {name:>17}: compute {busy / args.steps * 1e3:6.2f} ms/step, "
            f"then {waited / args.steps * 1e3:5.2f} ms/step in it"
        )
        dist.barrier()
    for rank_seen in range(world):  # one rank's lines at a time
        if rank_seen == rank:
            print("\n".join(lines), flush=True)
        dist.barrier()
    dist.destroy_process_group()


def many_processes(args: argparse.Namespace) -> None:
    import torch.multiprocessing as mp

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    print(
        f"{args.ranks} processes (gloo on 127.0.0.1), 1 thread each, per-rank batch {args.batch}, "
        f"{args.steps} steps per mode"
    )
    mp.start_processes(rank_main, args=(args.ranks, port, args), nprocs=args.ranks, start_method="spawn")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--batch", type=int, default=64, help="images per step and rank (the default run's)")
    parser.add_argument("--steps", type=int, default=100, help="timed steps")
    parser.add_argument("--warmup", type=int, default=20, help="steps before the timed ones")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--top", type=int, default=15, help="operations to list (one process)")
    args = parser.parse_args()
    if args.ranks == 1:
        one_process(args)
    else:
        many_processes(args)


if __name__ == "__main__":
    main()
