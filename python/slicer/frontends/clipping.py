"""Gradient clipping in a training step, and the guard that refuses what a loss function asks of torch that the
step would not honour.

Clipping runs between the backward pass and the optimizer's update, on the gradients by parameter name:

- by global norm, as `torch.nn.utils.clip_grad_norm_(params, max_norm)` (norm_type 2, foreach=False):
  `total_norm = ||(||g_1||, ..., ||g_n||)||`, `coef = min(max_norm / (total_norm + 1e-6), 1)`, every `g *= coef`.
  The program forms the total as `sqrt(sum_i sum(g_i * g_i))` -- the same number up to rounding (torch's square
  root of each norm, squared again, is the only difference) -- so that, partitioned, each gradient's sum of
  squares stays a partial sum and ONE all_reduce of a scalar makes the total (a square root per gradient would
  need each one reduced first);
- by value, as `torch.nn.utils.clip_grad_value_(params, clip_value)`: every `g = clamp(g, -v, v)`.

Details: docs/module-notes.md, `frontends/clipping.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slicer.core.errors import FrontendError

#: What torch adds to the total norm before dividing by it (torch/nn/utils/clip_grad.py).
NORM_EPSILON = 1e-6


@dataclass(frozen=True)
class Clip:
    """One clipping request: `kind` "norm" (`limit` the largest global norm) or "value" (`limit` the largest
    magnitude), over the gradients of `names` (trained parameters, in order; None: all of them)."""

    kind: str
    limit: float
    names: tuple[str, ...] | None = None

    def apply(self, torch, grads: dict) -> dict:
        """`grads` (name -> gradient) with this request's gradients clipped."""
        names = [n for n in (self.names if self.names is not None else grads) if n in grads]
        if not names:
            return grads
        if self.kind == "value":
            return {**grads, **{n: grads[n].clamp(-self.limit, self.limit) for n in names}}
        squares = [(grads[n] * grads[n]).sum() for n in names]
        total = squares[0]
        for square in squares[1:]:
            total = total + square
        total_norm = total.sqrt()
        coef = torch.clamp(self.limit / (total_norm + NORM_EPSILON), max=1.0)
        return {**grads, **{n: grads[n] * coef.to(grads[n].dtype) for n in names}}


def _limit(call: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise FrontendError(f"{call}: {name} must be a finite number > 0, got {value!r}")
    return float(value)


def optimizer_clip(optimizer) -> list[Clip]:
    """The optimizer's own request (`clip_grad_norm=`), if any."""
    limit = getattr(optimizer, "clip_grad_norm", None)
    return [] if limit is None else [Clip("norm", limit)]


class LossGuard:
    """Installed while the loss function is traced (a context manager): records `clip_grad_norm_` and
    `clip_grad_value_` requests (`clips`) and refuses what would be ignored (see the module docstring).
    `weights` (name -> the tensor the model computes with) is set before each trace of the loss."""

    _NORM = ("clip_grad_norm_", "clip_grad_norm")
    _REFUSED = ("get_total_norm", "clip_grads_with_norm_")

    def __init__(self, torch, named_parameters: dict):
        self.torch = torch
        self.clips: list[Clip] = []
        self.weights: dict = {}
        self.originals = {id(p): n for n, p in named_parameters.items()}
        self._saved: list = []

    def _name_of(self, tensor) -> str | None:
        for name, weight in self.weights.items():
            if weight is tensor:
                return name
        return self.originals.get(id(tensor))

    def _names(self, call: str, parameters) -> tuple[str, ...]:
        tensors = [parameters] if isinstance(parameters, self.torch.Tensor) else list(parameters)
        names = []
        for tensor in tensors:
            name = self._name_of(tensor)
            if name is None:
                raise FrontendError(f"{call}: got a tensor that is not a parameter of the model; pass "
                                    "model.parameters() (or some of them)")
            names.append(name)
        return tuple(names)

    def _clip_norm(self, parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
        call = "torch.nn.utils.clip_grad_norm_ in the loss function"
        if norm_type != 2 or error_if_nonfinite:
            raise FrontendError(f"{call}: Slicer clips by the 2-norm only, without error_if_nonfinite; got "
                                f"norm_type={norm_type!r}, error_if_nonfinite={error_if_nonfinite!r}")
        self.clips.append(Clip("norm", _limit(call, "max_norm", max_norm), self._names(call, parameters)))
        # The norm is only known once the gradients are: a NaN makes any use of it in the loss visible.
        return self.torch.tensor(float("nan"))

    def _clip_value(self, parameters, clip_value, foreach=None):
        call = "torch.nn.utils.clip_grad_value_ in the loss function"
        self.clips.append(Clip("value", _limit(call, "clip_value", clip_value), self._names(call, parameters)))

    def _refuse(self, what: str, advice: str):
        def refuse(*args, **kwargs):
            raise FrontendError(f"training_step: the loss function calls {what}, which Slicer does not honour "
                                f"there: {advice}")
        return refuse

    def _patch(self, owner, name: str, value) -> None:
        self._saved.append((owner, name, owner.__dict__.get(name, _MISSING)))
        setattr(owner, name, value)

    def __enter__(self):
        torch = self.torch
        utils, clip_module = torch.nn.utils, torch.nn.utils.clip_grad
        for module in (utils, clip_module):
            for name in self._NORM:
                self._patch(module, name, self._clip_norm)
            self._patch(module, "clip_grad_value_", self._clip_value)
            for name in self._REFUSED:
                if hasattr(module, name):
                    self._patch(module, name, self._refuse(f"{name} of torch.nn.utils", _CLIP_ADVICE))
        self._patch(torch.Tensor, "backward", self._refuse("Tensor.backward()", "return the loss; the step computes "
                                                           "its gradients and the optimizer's update"))
        self._patch(torch.Tensor, "grad", property(self._grad, self._grad))
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._hook = register_optimizer_step_pre_hook(self._refuse(
            "a torch.optim optimizer's step()", "give the optimizer's settings to slicer.SGD or slicer.AdamW "
            "(training_step(..., optimizer=...)); the step applies its update"))
        return self

    def _grad(self, tensor, *value):
        name = self._name_of(tensor)
        if name is None:  # not a parameter of the model: torch's own attribute
            descriptor = self.torch._C.TensorBase.__dict__["grad"]
            return descriptor.__set__(tensor, *value) if value else descriptor.__get__(tensor)
        raise FrontendError(f"training_step: the loss function {'writes' if value else 'reads'} the .grad of "
                            f"parameter '{name}', which does not exist while the loss is computed (the step "
                            f"computes the gradients from the loss it returns): {_CLIP_ADVICE}")

    def __exit__(self, *exc):
        self._hook.remove()
        for owner, name, old in reversed(self._saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
        self._saved.clear()


_MISSING = object()
_CLIP_ADVICE = ("to clip the gradients call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) or "
                "clip_grad_value_ in the loss function (Slicer records the request), or pass clip_grad_norm= to "
                "slicer.SGD / slicer.AdamW; other changes to gradients are not supported")


__all__ = ["Clip", "LossGuard", "NORM_EPSILON", "optimizer_clip"]
