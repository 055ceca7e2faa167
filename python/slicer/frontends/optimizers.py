"""The optimizers a training step applies (`slicer.training_step(..., optimizer=...)`): `SGD` and `AdamW`, small
frozen values whose update is written in torch ops, traced into the step with the forward and the backward.

Each computes what `torch.optim.SGD` / `torch.optim.AdamW` compute (`foreach=False`, the single-tensor path:
torch/optim/sgd.py `_single_tensor_sgd`, torch/optim/adam.py `_single_tensor_adam` with decoupled weight decay),
in the same order of operations, on state that is an argument of the step and comes back as a result:

- SGD with momentum keeps `momentum.<param>`. torch's first step sets the buffer to the gradient; here the
  buffer starts at zeros and every step computes `buf = momentum * buf + d_p`, which on the first step is
  `0 + d_p`, the gradient exactly (with torch's default dampening 0, the only one offered here).
- AdamW keeps `exp_avg.<param>`, `exp_avg_sq.<param>` and `step` (a float32 scalar tensor, as torch's). The
  bias corrections depend on `step`, so they are computed in the program, in float64 as torch computes them
  (in Python floats): `1 - beta ** step` in float32 would lose five digits to cancellation on the first steps
  (1 - 0.999 ** 1 = 0.00099998713 in float32), and an `expm1` form relies on the kernels' expm1, which is
  `exp(x) - 1` (the same loss). The step size and the square root of the second correction are then rounded to
  float32, where torch rounds the Python floats it multiplies float32 tensors by.

Details: docs/module-notes.md, `frontends/optimizers.py`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slicer.core.errors import FrontendError, InputError

#: A hyperparameter's setting: a number, or a schedule (a function of the step number, `slicer.schedules`).
Setting = float | Callable[[int], float]


def _problem(owner: str, name: str, value, *, low: float = 0.0, low_open: bool = False,
             high: float | None = None, advice: str = "") -> str | None:
    """What is wrong with `value` as the option `name` (a finite number in range), naming what to pass; None
    when nothing is."""
    bound = f"{'>' if low_open else '>='} {low:g}" + (f" and < {high:g}" if high is not None else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{owner}: {name} must be a finite number {bound}, got {value!r}{advice}"
    if value < low or (low_open and value == low) or (high is not None and value >= high):
        return f"{owner}: {name} must be {bound}, got {value!r}{advice}"
    return None


def _number(owner: str, name: str, value, **bounds) -> float:
    """`value` as a float, checked in range (`_problem`); FrontendError otherwise."""
    problem = _problem(owner, name, value, **bounds)
    if problem is not None:
        raise FrontendError(problem)
    return float(value)


def _setting(owner: str, name: str, value, **bounds) -> Setting:
    """A hyperparameter's setting as given: a schedule (any callable) kept, a number checked."""
    return value if callable(value) else _number(owner, name, value, **bounds)


#: The range of every hyperparameter's value at a step (a schedule's or `session.step(name=...)`'s): a learning
#: rate may be 0 there (a warmup's first step), not in the optimizer's own setting.
RANGES: dict[str, dict[str, Any]] = {"lr": {}, "weight_decay": {}, "momentum": {"high": 1.0}, "beta1": {"high": 1.0},
                                     "beta2": {"high": 1.0}}


class _Optimizer:
    """What both optimizers share: hyperparameters as runtime scalars, and gradient clipping."""

    if TYPE_CHECKING:  # what each optimizer defines: a field, and its own list of hyperparameters
        clip_grad_norm: float | None

        def hyperparameters(self) -> dict[str, Setting]: ...

    def hyperparameter_values(self, step: int, given: Mapping[str, object] | None = None, *,
                              at_import: bool = False) -> dict[str, float]:
        """The value of every hyperparameter (`hyperparameters()`: name -> number or schedule, the "hyper"
        arguments) at step `step` (0 for the first): `given[name]` where given (`session.step(lr=...)`), else
        its schedule's value at `step`, else its number. InputError (FrontendError `at_import`) for a name that
        is none of them, or a value that is not a finite number in its range."""
        settings, given = self.hyperparameters(), dict(given or {})
        owner = type(self).__name__
        unknown = sorted(set(given) - set(settings))
        if unknown:
            raise InputError(f"{owner} has no hyperparameter {', '.join(map(repr, unknown))}: a step takes "
                             f"{', '.join(settings)} (e.g. session.step(*batch, lr=1e-3))")
        values = {}
        for name, setting in settings.items():
            if name in given:
                value, source = given[name], f"{name} (given to the step)"
            elif callable(setting):
                value, source = setting(step), f"{name} (its schedule {setting!r} at step {step})"
            else:
                value, source = setting, name
            problem = _problem(owner, source, value, **RANGES[name])
            if problem is not None and at_import:
                raise FrontendError(problem)
            if problem is not None:
                raise InputError(problem)
            values[name] = float(value)  # type: ignore[arg-type]  # checked by _problem: a finite number
        return values

    def _check_clipping(self) -> None:
        if self.clip_grad_norm is not None:
            object.__setattr__(self, "clip_grad_norm", _number(
                type(self).__name__, "clip_grad_norm", self.clip_grad_norm, low_open=True,
                advice=" (the largest global norm of the gradients, e.g. clip_grad_norm=1.0; None: no clipping)"))


@dataclass(frozen=True)
class SGD(_Optimizer):
    """Stochastic gradient descent, as `torch.optim.SGD(params, lr, momentum, weight_decay=weight_decay)`:
    `d_p = grad + weight_decay * p`; with momentum `buf = momentum * buf + d_p; d_p = buf`; `p = p - lr * d_p`.
    State: `momentum.<param>` per parameter when `momentum` is not 0, none otherwise. Hyperparameters: `lr`,
    `weight_decay`, and `momentum` when it is not 0 (each a number or a schedule). `clip_grad_norm`: clip the
    gradients to this global norm first (None: no clipping)."""

    lr: Setting
    momentum: Setting = 0.0
    weight_decay: Setting = 0.0
    clip_grad_norm: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "lr", _setting("SGD", "lr", self.lr, low_open=True, advice=" (e.g. SGD(lr=0.1))"))
        object.__setattr__(self, "momentum", _setting("SGD", "momentum", self.momentum, high=1.0))
        object.__setattr__(self, "weight_decay", _setting("SGD", "weight_decay", self.weight_decay))
        self._check_clipping()

    def hyperparameters(self) -> dict[str, Setting]:
        named = {"lr": self.lr, "weight_decay": self.weight_decay}
        return {**named, "momentum": self.momentum} if self.momentum else named

    def state_names(self, param: str) -> tuple[str, ...]:
        """The state kept for the parameter named `param`."""
        return (f"momentum.{param}",) if self.momentum else ()

    def shared_state(self) -> tuple[str, ...]:
        """The state kept once for all parameters (none)."""
        return ()

    def update(self, params: dict, grads: dict, state: dict, hyper: dict) -> tuple[dict, dict]:
        """(new parameters, new state) from the parameters, their gradients, the state (torch tensors, by name;
        the state as `state_names` name it) and the hyperparameters (float64 0-d tensors, by name). torch's
        `a.add(b, alpha=s)` is `a + float32(s) * b`, written so with the scalar rounded to each tensor's dtype."""
        new_params, new_state = {}, {}
        for name, p in params.items():
            d_p = grads[name] + hyper["weight_decay"].to(p.dtype) * p
            if self.momentum:
                key = f"momentum.{name}"
                d_p = new_state[key] = state[key] * hyper["momentum"].to(p.dtype) + d_p
            new_params[name] = p + (-hyper["lr"]).to(p.dtype) * d_p
        return new_params, new_state


@dataclass(frozen=True)
class AdamW(_Optimizer):
    """Adam with decoupled weight decay, as `torch.optim.AdamW(params, lr, betas, eps, weight_decay)`:
    `p *= 1 - lr * weight_decay`; `m = lerp(m, g, 1 - beta1)`; `v = beta2 * v + (1 - beta2) g^2`;
    `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`. State: `exp_avg.<param>`,
    `exp_avg_sq.<param>` per parameter and `step` (t, counted in the program). Hyperparameters: `lr`,
    `weight_decay`, `beta1`, `beta2` (`betas`), each a number or a schedule. `clip_grad_norm` as SGD's."""

    lr: Setting
    betas: tuple[Setting, Setting] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: Setting = 0.01
    clip_grad_norm: float | None = None

    def __post_init__(self):
        object.__setattr__(self, "lr", _setting("AdamW", "lr", self.lr, low_open=True,
                                                advice=" (e.g. AdamW(lr=1e-3))"))
        betas = self.betas
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise FrontendError(f"AdamW: betas must be a pair (beta1, beta2), e.g. (0.9, 0.999), got {betas!r}")
        object.__setattr__(self, "betas", tuple(_setting("AdamW", f"betas[{i}]", b, high=1.0)
                                                for i, b in enumerate(betas)))
        object.__setattr__(self, "eps", _number("AdamW", "eps", self.eps))
        object.__setattr__(self, "weight_decay", _setting("AdamW", "weight_decay", self.weight_decay))
        self._check_clipping()

    def hyperparameters(self) -> dict[str, Setting]:
        return {"lr": self.lr, "weight_decay": self.weight_decay, "beta1": self.betas[0], "beta2": self.betas[1]}

    def state_names(self, param: str) -> tuple[str, ...]:
        """The state kept for the parameter named `param`."""
        return f"exp_avg.{param}", f"exp_avg_sq.{param}"

    def shared_state(self) -> tuple[str, ...]:
        """The state kept once for all parameters: the step count."""
        return ("step",)

    def update(self, params: dict, grads: dict, state: dict, hyper: dict) -> tuple[dict, dict]:
        """(new parameters, new state); see `SGD.update`. The scalars torch forms from Python floats are formed
        in float64 from the hyperparameters and rounded to float32 once (see the module docstring); torch's
        `addcmul(g, g, value=s)` is `v + s * g * g`, in that order."""
        import torch  # optional dependency; only called while torch traces the step

        lr, weight_decay, beta1, beta2 = (hyper[n] for n in ("lr", "weight_decay", "beta1", "beta2"))
        step = state["step"] + 1
        new_params, new_state = {}, {"step": step}
        t = step.to(torch.float64)  # the bias corrections in double precision (see the module docstring)
        bias_correction1 = 1 - torch.pow(beta1, t)
        bias_correction2 = 1 - torch.pow(beta2, t)
        low = step.dtype  # torch rounds the Python floats to the float32 tensors' dtype
        step_size = (lr / bias_correction1).to(low)
        bias_correction2_sqrt = bias_correction2.sqrt().to(low)
        decay, weight1 = (1 - lr * weight_decay).to(low), (1 - beta1).to(low)
        beta2_low, weight2 = beta2.to(low), (1 - beta2).to(low)
        for name, p in params.items():
            grad, exp_avg, exp_avg_sq = grads[name], state[f"exp_avg.{name}"], state[f"exp_avg_sq.{name}"]
            p = p * decay
            exp_avg = exp_avg.lerp(grad, weight1)
            exp_avg_sq = exp_avg_sq * beta2_low + weight2 * grad * grad
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add(self.eps)
            new_params[name] = p - step_size * (exp_avg / denom)
            new_state[f"exp_avg.{name}"], new_state[f"exp_avg_sq.{name}"] = exp_avg, exp_avg_sq
        return new_params, new_state


__all__ = ["AdamW", "RANGES", "SGD", "Setting"]
