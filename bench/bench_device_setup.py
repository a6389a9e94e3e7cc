"""Time each step of a rank's device set-up in one fresh process, as the trainer takes them.

    python bench/bench_device_setup.py --data ../shared/data/mnist [--steps 200] [--batch-size 128]

Prints the seconds of each step, in order: ``import torch``, ``torch.cuda.is_available()``, the CUDA
context (``set_device`` and a first allocation), the trainer's imports, MNIST read and decoded on the
CPU, the tensors moved to the device, the model built there, the first forward pass (cuDNN's load and
the first kernels), the first backward pass, the first optimizer step, the next few steps, and then the
steady rate over ``--steps`` more steps of the default batch (what an epoch's training costs once
warm). Without CUDA the device steps run on the CPU and the context line is absent.
A script that prints, never a timed test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default="./data/mnist", help="MNIST root (see trainer --help)")
    parser.add_argument("--steps", type=int, default=200, help="steady-state steps to time")
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    sys.path.insert(0, str(REPO_ROOT))
    rows: list[tuple[str, float]] = []
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        rows.append((name, now - clock))
        clock = now

    import torch

    lap("import torch")
    cuda = torch.cuda.is_available()
    lap("torch.cuda.is_available()")
    device = torch.device("cpu")
    if cuda:
        torch.cuda.set_device(0)
        torch.empty(1, device="cuda")
        torch.cuda.synchronize()
        device = torch.device("cuda", 0)
        lap("CUDA context (set_device, first allocation)")
    from torch import nn

    from trainer.data import load_mnist, normalise
    from trainer.model import build_model
    from trainer.optim import AdamW

    lap("the trainer's imports")
    cpu = load_mnist(Path(args.data), torch.device("cpu"))
    lap("MNIST read, checked and decoded (CPU)")
    train_x, train_y = cpu.train_x.to(device), cpu.train_y.to(device)
    test_x = cpu.test_x.to(device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    sync()
    lap("MNIST to the device")
    torch.manual_seed(0)
    model = build_model(device)
    optimizer = AdamW(model.parameters(), lr=0.01, weight_decay=0.0)
    sync()
    lap("model and optimizer on the device")
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(train_y), generator=generator).to(device)

    def batch(i: int) -> torch.Tensor:
        start = (i * args.batch_size) % (len(train_y) - args.batch_size)
        return order[start : start + args.batch_size]

    index = batch(0)
    logits = model(normalise(train_x[index]))
    loss = nn.functional.cross_entropy(logits, train_y[index], label_smoothing=0.1)
    sync()
    lap("first forward and loss")
    loss.backward()
    sync()
    lap("first backward")
    optimizer.step()
    sync()
    lap("first optimizer step")

    def steps(count: int, offset: int) -> None:
        for i in range(offset, offset + count):
            index = batch(i)
            out = model(normalise(train_x[index]))
            optimizer.zero_grad()
            nn.functional.cross_entropy(out, train_y[index], label_smoothing=0.1).backward()
            optimizer.step()
        sync()

    steps(5, 1)
    lap("steps 2-6")
    steps(args.steps, 6)
    steady = time.perf_counter() - clock
    lap(f"{args.steps} steady steps")
    with torch.inference_mode():
        model.eval()
        for chunk in torch.arange(len(test_x), device=device).split(256):
            model(normalise(test_x[chunk])).argmax(dim=1)
        sync()
    lap("one evaluation of the test set")
    for name, seconds in rows:
        print(f"{name:48s} {seconds:8.3f} s")
    per_step = steady / args.steps
    epoch_steps = len(train_y) // args.batch_size
    print(f"{'steady step, batch ' + str(args.batch_size):48s} {per_step * 1000:8.3f} ms")
    print(
        f"{'an epoch at that rate (' + str(epoch_steps) + ' steps)':48s} {per_step * epoch_steps:8.3f} s"
        f"  ({args.batch_size / per_step:,.0f} samples/s)"
    )
    print(f"device: {torch.cuda.get_device_name(0) if cuda else 'cpu'}; torch {torch.__version__}")


if __name__ == "__main__":
    main()
