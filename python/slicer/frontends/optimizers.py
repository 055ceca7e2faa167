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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slicer.core.errors import FrontendError


def _number(owner: str, name: str, value, *, low: float = 0.0, low_open: bool = False, high: float | None = None,
            advice: str = "") -> float:
    """`value` as a float, checked in range; FrontendError naming the option and what to pass otherwise."""
    bound = f"{'>' if low_open else '>='} {low:g}" + (f" and < {high:g}" if high is not None else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise FrontendError(f"{owner}: {name} must be a finite number {bound}, got {value!r}{advice}")
    if value < low or (low_open and value == low) or (high is not None and value >= high):
        raise FrontendError(f"{owner}: {name} must be {bound}, got {value!r}{advice}")
    return float(value)


@dataclass(frozen=True)
class SGD:
    """Stochastic gradient descent, as `torch.optim.SGD(params, lr, momentum, weight_decay=weight_decay)`:
    `d_p = grad + weight_decay * p`; with momentum `buf = momentum * buf + d_p; d_p = buf`; `p = p - lr * d_p`.
    State: `momentum.<param>` per parameter when `momentum` is not 0, none otherwise."""

    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "lr", _number("SGD", "lr", self.lr, low_open=True, advice=" (e.g. SGD(lr=0.1))"))
        object.__setattr__(self, "momentum", _number("SGD", "momentum", self.momentum, high=1.0))
        object.__setattr__(self, "weight_decay", _number("SGD", "weight_decay", self.weight_decay))

    def state_names(self, param: str) -> tuple[str, ...]:
        """The state kept for the parameter named `param`."""
        return (f"momentum.{param}",) if self.momentum else ()

    def shared_state(self) -> tuple[str, ...]:
        """The state kept once for all parameters (none)."""
        return ()

    def update(self, params: dict, grads: dict, state: dict) -> tuple[dict, dict]:
        """(new parameters, new state) from the parameters, their gradients and the state (torch tensors, by
        name; the state as `state_names` name it)."""
        new_params, new_state = {}, {}
        for name, p in params.items():
            d_p = grads[name]
            if self.weight_decay:
                d_p = d_p.add(p, alpha=self.weight_decay)
            if self.momentum:
                key = f"momentum.{name}"
                d_p = new_state[key] = state[key].mul(self.momentum).add(d_p)
            new_params[name] = p.add(d_p, alpha=-self.lr)
        return new_params, new_state


@dataclass(frozen=True)
class AdamW:
    """Adam with decoupled weight decay, as `torch.optim.AdamW(params, lr, betas, eps, weight_decay)`:
    `p *= 1 - lr * weight_decay`; `m = lerp(m, g, 1 - beta1)`; `v = beta2 * v + (1 - beta2) g^2`;
    `p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)`. State: `exp_avg.<param>`,
    `exp_avg_sq.<param>` per parameter and `step` (t, counted in the program)."""

    lr: float
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01

    def __post_init__(self):
        object.__setattr__(self, "lr", _number("AdamW", "lr", self.lr, low_open=True,
                                               advice=" (e.g. AdamW(lr=1e-3))"))
        betas = self.betas
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise FrontendError(f"AdamW: betas must be a pair (beta1, beta2), e.g. (0.9, 0.999), got {betas!r}")
        object.__setattr__(self, "betas", tuple(_number("AdamW", f"betas[{i}]", b, high=1.0)
                                                for i, b in enumerate(betas)))
        object.__setattr__(self, "eps", _number("AdamW", "eps", self.eps))
        object.__setattr__(self, "weight_decay", _number("AdamW", "weight_decay", self.weight_decay))

    def state_names(self, param: str) -> tuple[str, ...]:
        """The state kept for the parameter named `param`."""
        return f"exp_avg.{param}", f"exp_avg_sq.{param}"

    def shared_state(self) -> tuple[str, ...]:
        """The state kept once for all parameters: the step count."""
        return ("step",)

    def update(self, params: dict, grads: dict, state: dict) -> tuple[dict, dict]:
        """(new parameters, new state); see `SGD.update`."""
        import torch  # optional dependency; only called while torch traces the step

        beta1, beta2 = self.betas
        step = state["step"] + 1
        new_params, new_state = {}, {"step": step}
        t = step.to(torch.float64)  # the bias corrections in double precision (see the module docstring)
        bias_correction1 = 1 - torch.pow(beta1, t)
        bias_correction2 = 1 - torch.pow(beta2, t)
        step_size = (self.lr / bias_correction1).to(step.dtype)
        bias_correction2_sqrt = bias_correction2.sqrt().to(step.dtype)
        for name, p in params.items():
            grad, exp_avg, exp_avg_sq = grads[name], state[f"exp_avg.{name}"], state[f"exp_avg_sq.{name}"]
            if self.weight_decay:
                p = p.mul(1 - self.lr * self.weight_decay)
            exp_avg = exp_avg.lerp(grad, 1 - beta1)
            exp_avg_sq = exp_avg_sq.mul(beta2).addcmul(grad, grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add(self.eps)
            new_params[name] = p - step_size * (exp_avg / denom)
            new_state[f"exp_avg.{name}"], new_state[f"exp_avg_sq.{name}"] = exp_avg, exp_avg_sq
        return new_params, new_state


__all__ = ["AdamW", "SGD"]
