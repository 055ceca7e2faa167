"""A training session's state from torch: a model's parameters and a torch.optim optimizer's state, by the names
a training step gives them (`slicer.torch_state(model, optimizer)`, for `prog.session(state=...)`).

A step's state arguments are named like the model's `state_dict()` (`0.weight`) and, for the optimizer, as
`optimizers.py` names them: `momentum.<param>` (SGD), `exp_avg.<param>`, `exp_avg_sq.<param>` and one `step`
(AdamW). torch.optim keeps its state per parameter object (`optimizer.state[p]`: `momentum_buffer`, `exp_avg`,
`exp_avg_sq`, `step`), so this maps each parameter's name to its object. A parameter torch has no state for yet
(no step taken) gets zeros, which is where the training step's state starts too. The other way, a checkpoint
as a torch-style dict, is `slicer.load_checkpoint`.
"""

from __future__ import annotations

from slicer.core.errors import FrontendError

_TORCH_KEYS = {"momentum": "momentum_buffer", "exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}


def torch_state(model, optimizer=None) -> dict:
    """{name: tensor}: `model`'s parameters and buffers, and `optimizer`'s state (torch.optim.SGD or AdamW over
    the model's parameters) under the training step's names."""
    if not hasattr(model, "state_dict") or not hasattr(model, "named_parameters"):
        raise FrontendError(f"torch_state takes a torch.nn.Module, got {type(model).__name__}")
    state = {name: value.detach() for name, value in model.state_dict().items()}
    if optimizer is None:
        return state
    kind = type(optimizer).__name__
    if kind not in ("SGD", "AdamW"):
        raise FrontendError(f"torch_state: optimizer {kind} has no slicer counterpart: use torch.optim.SGD or "
                            "torch.optim.AdamW (slicer.SGD, slicer.AdamW)")
    import torch

    owned = {id(p) for group in optimizer.param_groups for p in group["params"]}
    steps = []
    for name, param in model.named_parameters():
        if id(param) not in owned:
            continue
        held = optimizer.state.get(param, {})
        keys = ("exp_avg", "exp_avg_sq") if kind == "AdamW" else \
            (("momentum",) if optimizer.param_groups[0].get("momentum") else ())
        for key in keys:
            value = held.get(_TORCH_KEYS[key])
            state[f"{key}.{name}"] = (value if value is not None else torch.zeros_like(param)).detach().clone()
        if "step" in held:
            steps.append(float(held["step"]))
    if kind == "AdamW":
        if len(set(steps)) > 1:
            raise FrontendError("torch_state: the parameters have taken different numbers of steps "
                                f"{sorted(set(steps))}; "
                                "a training step counts one `step` for all of them")
        state["step"] = torch.tensor(steps[0] if steps else 0.0, dtype=torch.float32)
    return state


__all__ = ["torch_state"]
