"""Rank information from torchrun's environment, and the process group around a run.

Without torchrun (no ``WORLD_SIZE`` in the environment) the trainer is one plain process of
world size 1 and no process group is created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer.errors import UsageError

BACKENDS = ("auto", "nccl", "gloo")


@dataclass(frozen=True)
class DistEnv:
    """What torchrun told this process about its place in the job."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_env_from(environ: Mapping[str, str]) -> DistEnv:
    """Read RANK, LOCAL_RANK and WORLD_SIZE (all default to a single process)."""
    values = {}
    for key, default in (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1)):
        raw = environ.get(key, str(default))
        if not raw.isdigit():
            raise UsageError(f"environment variable {key}={raw!r} is not a non-negative integer")
        values[key] = int(raw)
    env = DistEnv(values["RANK"], values["LOCAL_RANK"], values["WORLD_SIZE"])
    if env.world_size < 1 or env.rank >= env.world_size:
        raise UsageError(f"RANK={env.rank} is not below WORLD_SIZE={env.world_size}")
    return env


def choose_backend(requested: str, cuda_available: bool) -> str:
    """``auto`` is nccl with CUDA, gloo without; nccl without CUDA is a usage error."""
    if requested == "auto":
        return "nccl" if cuda_available else "gloo"
    if requested == "nccl" and not cuda_available:
        raise UsageError("--backend=nccl needs a CUDA device and none is visible; use auto or gloo")
    if requested not in BACKENDS:
        raise UsageError(f"--backend={requested!r}: expected one of {', '.join(BACKENDS)}")
    return requested


def choose_device(env: DistEnv, cuda_available: bool) -> torch.device:
    """``cuda:<local rank>`` when CUDA is visible, else the CPU."""
    if cuda_available:
        torch.cuda.set_device(env.local_rank % torch.cuda.device_count())
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_process_group(env: DistEnv, backend: str, device: torch.device, timeout_s: int) -> None:
    """Join the job's process group (MASTER_ADDR/MASTER_PORT come from torchrun's env)."""
    if not env.is_distributed:
        return
    kwargs: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=timeout_s)}
    if device.type == "cuda":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)


def destroy_process_group() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def wait_for_all_ranks() -> None:
    """Every rank reaches this point before any goes on. At the end of a run it keeps a rank from
    tearing down its gloo connections while rank 0 still writes the results, which could abort the
    early rank at exit ("terminate called without an active exception")."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Sum a few float counters over all ranks (identity on a single process)."""
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    return bytes(tensor.cpu().clone().untyped_storage())


def _bytes_tensor(data: bytes, size: int, device: torch.device) -> torch.Tensor:
    """``data`` zero-padded to ``size`` bytes as a uint8 tensor on ``device``."""
    tensor = torch.zeros(size, dtype=torch.uint8)
    if data:
        tensor[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return tensor.to(device)


def broadcast_bytes(data: bytes, device: torch.device) -> bytes:
    """Rank 0's ``data`` on every rank (object collectives would need numpy; tensors do not)."""
    if not dist.is_initialized():
        return data
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    dist.broadcast(size, src=0)
    buffer = _bytes_tensor(data if dist.get_rank() == 0 else b"", int(size.item()), device)
    if buffer.numel():
        dist.broadcast(buffer, src=0)
    return _tensor_bytes(buffer)


def gather_bytes(data: bytes, device: torch.device) -> list[bytes]:
    """Every rank's ``data``, in rank order (``[data]`` on a single process)."""
    if not dist.is_initialized():
        return [data]
    world = dist.get_world_size()
    size = torch.tensor([len(data)], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = max(int(s.item()) for s in sizes)
    padded = _bytes_tensor(data, longest, device)
    gathered = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    return [_tensor_bytes(t)[: int(n.item())] for t, n in zip(gathered, sizes, strict=True)]


def broadcast_module_from_main(module: torch.nn.Module) -> None:
    """Every rank's parameters and buffers made rank 0's, before training (DistributedDataParallel's
    constructor does the same: ``_sync_module_states``)."""
    if not dist.is_initialized():
        return
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            dist.broadcast(tensor, src=0)


def average_gradients(params: list[torch.Tensor]) -> None:
    """Each gradient replaced by its mean over the ranks, in one all-reduce of all of them.

    As DistributedDataParallel's reducer does (``torch/csrc/distributed/c10d/reducer.cpp``, no comm
    hook): each gradient multiplied by ``1 / world size`` as it is packed, then summed. A no-op
    without a process group.
    """
    if not dist.is_initialized():
        return
    grads = [p.grad for p in params if p.grad is not None]
    flat = torch.cat([grad.reshape(-1) for grad in grads]).mul_(1.0 / dist.get_world_size())
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset : offset + grad.numel()].view(grad.shape))
        offset += grad.numel()


def broadcast_buffers_from_main(module: torch.nn.Module) -> None:
    """Make BatchNorm running statistics identical on every rank (rank 0's), before eval/save.

    Training-mode forwards update each rank's own statistics and never read them, so they are not
    synchronised per step; parameters are identical on every rank already.
    """
    if not dist.is_initialized():
        return
    for buffer in module.buffers():
        dist.broadcast(buffer, src=0)
