"""AdamW and the one-cycle schedule, as ``torch.optim.AdamW`` and ``OneCycleLR`` compute them, without
importing ``torch.optim``.

Why not ``torch.optim``: in torch 2.13 every optimizer imports ``torch._dynamo`` (with sympy) the first
time it is constructed or stepped (``add_param_group``, ``zero_grad``, ``state_dict`` and
``load_state_dict`` are wrapped by ``torch._disable_dynamo`` in ``torch/_compile.py``, and ``step()`` by
``_use_grad_for_differentiable`` in ``torch/optim/optimizer.py``). That import costs every rank
2-3 s of CPU at start-up (``docs/BENCHMARKS.md``), more than a default epoch's training on a GPU.

The arithmetic is torch's, operation for operation (``torch/optim/adam.py`` ``_multi_tensor_adam``
with ``decoupled_weight_decay``, the path torch takes for a model on one device; its single-tensor
path computes the same; ``torch/optim/lr_scheduler.py`` ``OneCycleLR`` with its defaults: cosine
annealing, two phases, beta1 cycled between 0.95 and 0.85), so a run's numbers are the ones
``torch.optim`` gives: ``tests/trainer/test_optim.py`` compares them bit for bit. The state dicts keep
torch's layout (``state``/``param_groups``; ``last_epoch``), so either can resume the other's checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch

BETA2 = 0.999
EPS = 1e-8
BASE_MOMENTUM = 0.85  # OneCycleLR's defaults: beta1 falls from MAX to BASE while the lr warms up
MAX_MOMENTUM = 0.95


class AdamW:
    """Adam with decoupled weight decay over one group of parameters (``torch.optim.AdamW``'s update).

    ``lr`` and ``beta1`` are set by :class:`OneCycle` before each step, as torch's scheduler sets the
    group's ``lr`` and ``betas``.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float, weight_decay: float) -> None:
        self.params: list[torch.Tensor] = list(params)
        self.lr = lr
        self.beta1 = 0.9
        self.weight_decay = weight_decay
        self.steps = 0
        self.exp_avgs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sqs = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]

    def zero_grad(self) -> None:
        for param in self.params:
            param.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update from the parameters' gradients (every parameter must have one)."""
        params, exp_avgs, exp_avg_sqs = self.params, self.exp_avgs, self.exp_avg_sqs
        grads = [p.grad for p in params if p.grad is not None]
        if len(grads) != len(params):
            raise ValueError("AdamW.step: a parameter has no gradient")
        self.steps += 1
        lr, beta1 = self.lr, self.beta1
        torch._foreach_mul_(params, 1 - lr * self.weight_decay)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, BETA2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - BETA2)
        step = float(self.steps)  # torch's float32 step tensor, read back with .item()
        step_size = lr / (1 - beta1**step)
        bias_correction2_sqrt = (1 - BETA2**step) ** 0.5
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, bias_correction2_sqrt)
        torch._foreach_add_(denom, EPS)
        torch._foreach_addcdiv_(params, exp_avgs, denom, -step_size)

    def state_dict(self) -> dict[str, Any]:
        """``torch.optim.AdamW.state_dict()``'s layout: per-parameter ``step``, ``exp_avg``,
        ``exp_avg_sq`` by index, and the one group's settings."""
        state = {
            index: {
                "step": torch.tensor(float(self.steps), dtype=torch.float32),
                "exp_avg": self.exp_avgs[index],
                "exp_avg_sq": self.exp_avg_sqs[index],
            }
            for index in range(len(self.params))
            if self.steps
        }
        group = {
            "lr": self.lr,
            "betas": (self.beta1, BETA2),
            "eps": EPS,
            "weight_decay": self.weight_decay,
            "params": list(range(len(self.params))),
        }
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Load :meth:`state_dict`'s or ``torch.optim.AdamW``'s (one group, these parameters)."""
        (group,) = saved["param_groups"]
        if len(group["params"]) != len(self.params):
            raise ValueError(f"optimizer state for {len(group['params'])} parameters, not {len(self.params)}")
        self.lr = float(group["lr"])
        self.beta1 = float(group["betas"][0])
        self.weight_decay = float(group["weight_decay"])
        states = saved["state"]
        if not states:
            self.steps = 0
            return
        steps = {int(states[index]["step"]) for index in range(len(self.params))}
        if len(steps) != 1:
            raise ValueError(f"optimizer state with different step counts per parameter: {sorted(steps)}")
        self.steps = steps.pop()
        with torch.no_grad():
            for index, param in enumerate(self.params):
                for mine, key in ((self.exp_avgs, "exp_avg"), (self.exp_avg_sqs, "exp_avg_sq")):
                    mine[index].copy_(states[index][key].to(param.device))


class OneCycle:
    """``torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr, total_steps, pct_start, div_factor,
    final_div_factor)``: cosine warm-up from ``max_lr / div_factor`` to ``max_lr`` over ``pct_start``
    of the steps, then cosine decay to ``max_lr / div_factor / final_div_factor``; beta1 moves the
    other way, from 0.95 to 0.85 and back. Constructing it sets step 0's values, as torch's does."""

    def __init__(
        self,
        optimizer: AdamW,
        max_lr: float,
        total_steps: int,
        pct_start: float,
        div_factor: float,
        final_div_factor: float,
    ) -> None:
        if not 0 <= pct_start <= 1:
            raise ValueError(f"pct_start must be between 0 and 1, not {pct_start}")
        self.optimizer = optimizer
        self.total_steps = total_steps
        self.max_lr = max_lr
        self.initial_lr = max_lr / div_factor
        self.min_lr = self.initial_lr / final_div_factor
        self.warm_end = float(pct_start * total_steps) - 1
        self.last_epoch = 0  # torch's name: the steps taken so far
        self._apply()

    @staticmethod
    def _anneal(start: float, end: float, pct: float) -> float:
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)

    def values(self, step: int) -> tuple[float, float]:
        """The learning rate and beta1 for the update after ``step`` steps."""
        if step > self.total_steps:
            raise ValueError(f"step {step} is past the schedule's {self.total_steps} steps")
        if step <= self.warm_end:
            pct = step / self.warm_end
            lr = self._anneal(self.initial_lr, self.max_lr, pct)
            return lr, self._anneal(MAX_MOMENTUM, BASE_MOMENTUM, pct)
        end = self.total_steps - 1
        pct = (step - self.warm_end) / (end - self.warm_end)
        return self._anneal(self.max_lr, self.min_lr, pct), self._anneal(BASE_MOMENTUM, MAX_MOMENTUM, pct)

    def _apply(self) -> None:
        self.optimizer.lr, self.optimizer.beta1 = self.values(self.last_epoch)

    def step(self) -> None:
        self.last_epoch += 1
        self._apply()

    def get_last_lr(self) -> list[float]:
        return [self.optimizer.lr]

    def state_dict(self) -> dict[str, Any]:
        lrs = [self.optimizer.lr]
        return {"last_epoch": self.last_epoch, "total_steps": self.total_steps, "_last_lr": lrs}

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Load :meth:`state_dict`'s or ``OneCycleLR``'s; the optimizer's own state holds the values in
        force (as with torch), so only the step count is read."""
        if int(saved["total_steps"]) != self.total_steps:
            raise ValueError(f"schedule of {saved['total_steps']} steps, not {self.total_steps}")
        self.last_epoch = int(saved["last_epoch"])
