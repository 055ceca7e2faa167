"""Learning-rate schedules (`slicer.schedules`): a hyperparameter of `slicer.SGD` / `slicer.AdamW` given as a
function of the step number, evaluated by the session before each step and passed to the program as a runtime
scalar (no recompilation):

    opt = slicer.AdamW(lr=slicer.schedules.cosine(3e-4, total_steps=1000, warmup_steps=100, min_lr=3e-5))

Step `t` is the number of steps run before (0 for the first), as torch.optim.lr_scheduler counts them when
`scheduler.step()` follows `optimizer.step()`. Each schedule is `lr * factor(t)`, with torch's formulas
(listed in docs/module-notes.md, `frontends/schedules.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slicer.core.errors import FrontendError


def _check(what: str, name: str, value, *, low: float = 0.0, low_open: bool = False, high: float | None = None,
           integer: bool = False):
    """`value` checked for a schedule's setting; FrontendError naming the setting otherwise."""
    kind = "an integer" if integer else "a finite number"
    bad_type = isinstance(value, bool) or not isinstance(value, int if integer else (int, float))
    if bad_type or not math.isfinite(value) or value < low or (low_open and value == low) \
            or (high is not None and value > high):
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if high is not None else "")
        raise FrontendError(f"schedules {what}: {name} must be {kind} {bound}, got {value!r}")
    return value if integer else float(value)


@dataclass(frozen=True)
class Schedule:
    """`lr * factor(step)`; the base of every schedule here. Call it with a step number."""

    lr: float

    def factor(self, step: int) -> float:
        return 1.0

    def __call__(self, step: int) -> float:
        return self.lr * self.factor(step)


@dataclass(frozen=True)
class _Constant(Schedule):
    pass


@dataclass(frozen=True)
class _LinearWarmup(Schedule):
    warmup_steps: int
    start_factor: float

    def factor(self, step: int) -> float:
        if step >= self.warmup_steps:
            return 1.0
        return self.start_factor + (1.0 - self.start_factor) * step / self.warmup_steps


@dataclass(frozen=True)
class _Cosine(_LinearWarmup):
    total_steps: int
    min_lr: float

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return self.lr * self.factor(step)
        progress = min(step - self.warmup_steps, self.total_steps - self.warmup_steps)
        cosine = (1 + math.cos(math.pi * progress / (self.total_steps - self.warmup_steps))) / 2
        return self.min_lr + (self.lr - self.min_lr) * cosine


@dataclass(frozen=True)
class _StepDecay(Schedule):
    step_size: int
    gamma: float

    def factor(self, step: int) -> float:
        return self.gamma ** (step // self.step_size)


def constant(lr: float) -> Schedule:
    """`lr` at every step."""
    return _Constant(_check("constant", "lr", lr))


def linear_warmup(lr: float, warmup_steps: int, start_factor: float = 0.0) -> Schedule:
    """From `lr * start_factor` at step 0 linearly up to `lr` at step `warmup_steps`, then `lr` (torch's
    `LinearLR(start_factor, 1.0, total_iters=warmup_steps)`, which needs start_factor > 0; 0 starts at 0)."""
    return _LinearWarmup(_check("linear_warmup", "lr", lr), _check("linear_warmup", "warmup_steps", warmup_steps,
                                                                    low_open=True, integer=True),
                         _check("linear_warmup", "start_factor", start_factor, high=1.0))


def cosine(lr: float, total_steps: int, warmup_steps: int = 0, min_lr: float = 0.0,
           start_factor: float = 0.0) -> Schedule:
    """The linear warmup over `warmup_steps` (from `lr * start_factor`), then cosine annealing from `lr` to
    `min_lr` at `total_steps`, `min_lr` after (see the module docstring for torch's equivalents)."""
    lr = _check("cosine", "lr", lr)
    total = _check("cosine", "total_steps", total_steps, low_open=True, integer=True)
    warmup = _check("cosine", "warmup_steps", warmup_steps, integer=True)
    if warmup >= total:
        raise FrontendError(f"schedules cosine: warmup_steps ({warmup}) must be less than total_steps "
                            f"({total}): the cosine decay runs from the end of the warmup to total_steps")
    return _Cosine(lr, warmup, _check("cosine", "start_factor", start_factor, high=1.0), total,
                   _check("cosine", "min_lr", min_lr, high=lr))


def step_decay(lr: float, step_size: int, gamma: float = 0.1) -> Schedule:
    """`lr` times `gamma` every `step_size` steps (torch's `StepLR(step_size, gamma)`)."""
    return _StepDecay(_check("step_decay", "lr", lr), _check("step_decay", "step_size", step_size, low_open=True,
                                                             integer=True),
                      _check("step_decay", "gamma", gamma))


__all__ = ["Schedule", "constant", "cosine", "linear_warmup", "step_decay"]
