"""Mixed-precision training: `training_step(..., precision=MixedPrecision(param_dtype="bf16", reduce_dtype="f32"))`.

The policy is FSDP2's `MixedPrecisionPolicy(param_dtype, reduce_dtype)`: the parameters the step takes and
returns, and the optimizer's state and update, stay in f32 (the master copy); the forward and backward passes
compute on copies cast to `param_dtype` once per step (differentiable casts: autograd gives the gradients of the
f32 parameters, the backward of each cast widening its copy's gradient); floating inputs of the model are cast
to `param_dtype` too (FSDP2's `cast_forward_inputs`); the gradients are summed across devices in `reduce_dtype`.

Where the sums are done. torch-mlir writes a contraction on `param_dtype` operands as one accumulating in f32
(`extf` of each operand in its body, an f32 output) followed by a rounding to `param_dtype`; a weight's gradient
is then widened back to f32 by its cast's backward. Under data parallel or ZeRO the contraction's output is a
partial sum over the devices, and a rounding is not linear (`slicer.rules.linearity`), so the all_reduce or
reduce_scatter sums the f32 partial results, and the sum is rounded once, after it: the gradient is the one the
step computes on one device, and `reduce_dtype` is f32. Summing in `param_dtype` (each device's term rounded
first, half the bytes on the wire) is not offered: `reduce_dtype` must be "f32".

The compute copy of a trained f32 parameter is state, `<param_dtype>.<param>` (`bf16.fc1.weight`: its rounding),
written by the update next to the new parameter, so a step does not read the f32 parameters again to round them;
under ZeRO-3 it is sharded with its parameter and gathered in `param_dtype`. Details: docs/module-notes.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from slicer.core.errors import FrontendError

FLOAT_TYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}
"""The element types a policy may name, and torch's names for them."""


@dataclass(frozen=True)
class MixedPrecision:
    """A mixed-precision policy for `slicer.training_step`: compute in `param_dtype` ("bf16", "f16" or "f32"),
    sum gradients across devices in `reduce_dtype` (only "f32", see the module docstring); master parameters,
    optimizer state and update in f32. `cast_inputs`: cast the model's floating inputs to `param_dtype` (FSDP2's
    `cast_forward_inputs`). `output_dtype` (FSDP2's): cast the model's floating outputs to it ("f32": the loss
    function, a cross-entropy say, then computes in f32), or None to leave them in `param_dtype`."""

    param_dtype: str = "bf16"
    reduce_dtype: str = "f32"
    cast_inputs: bool = True
    output_dtype: str | None = None

    def __post_init__(self):
        for field in ("param_dtype", "reduce_dtype", "output_dtype"):
            value = getattr(self, field)
            if value not in FLOAT_TYPES and not (field == "output_dtype" and value is None):
                raise FrontendError(f"MixedPrecision: {field} must be one of {', '.join(FLOAT_TYPES)}, got "
                                    f"{value!r}")
        if self.reduce_dtype != "f32":
            raise FrontendError(f"MixedPrecision: reduce_dtype {self.reduce_dtype!r} is not supported: Slicer sums "
                                "gradients across devices in f32 (the f32 results of the contractions, rounded "
                                "once after the sum, as on one device); use reduce_dtype='f32'")

    def compute_dtype(self, torch):
        """torch's dtype of `param_dtype`."""
        return getattr(torch, FLOAT_TYPES[self.param_dtype])

    def compute_copies(self, torch, tensors: dict) -> dict:
        """`tensors` (name -> parameter tensor) with each floating f32 one replaced by its differentiable cast to
        `param_dtype` (the others as they are)."""
        dtype = self.compute_dtype(torch)
        return {n: t.to(dtype) if t.dtype == torch.float32 else t for n, t in tensors.items()}

    def cast_count(self, torch, parameters) -> int:
        """How many of `parameters` (tensors) `compute_copies` casts: the fences the step returns."""
        return sum(1 for t in parameters if t.dtype == torch.float32 and t.dtype != self.compute_dtype(torch))

    def copy_names(self, torch, parameters: dict, trained) -> dict[str, str]:
        """{name of a trained f32 parameter of `parameters` (name -> tensor) -> the state name of its compute
        copy, `<param_dtype>.<name>`}; empty when `param_dtype` is f32 (see the module docstring)."""
        if self.param_dtype == "f32":
            return {}
        return {n: f"{self.param_dtype}.{n}" for n in trained if parameters[n].dtype == torch.float32}

    def copies_of(self, torch, parameters: dict, copies: dict[str, str]) -> dict:
        """{state name -> the compute copy of its parameter} for `copies` (`copy_names`), from `parameters` (name ->
        f32 tensor): the initial state, and the new state from the updated parameters."""
        dtype = self.compute_dtype(torch)
        return {state: parameters[name].to(dtype) for name, state in copies.items()}

    def input_cast(self, torch):
        """A forward pre-hook casting the floating f32 tensors among a module's positional inputs to
        `param_dtype` (None when `cast_inputs` is off)."""
        if not self.cast_inputs:
            return None
        dtype = self.compute_dtype(torch)

        def cast(_module, args):
            return tuple(a.to(dtype) if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a
                         for a in args)

        return cast

    def output_cast(self, torch):
        """A forward hook casting the floating tensors among a module's outputs (a tensor, or a tuple or list of
        them) to `output_dtype` (None when it is not set)."""
        if self.output_dtype is None:
            return None
        dtype = getattr(torch, FLOAT_TYPES[self.output_dtype])

        def one(value):
            return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

        def cast(_module, _args, output):
            return type(output)(one(o) for o in output) if isinstance(output, (tuple, list)) else one(output)

        return cast


def check_precision(precision) -> None:
    """FrontendError unless `precision` is None or a `MixedPrecision`."""
    if precision is not None and not isinstance(precision, MixedPrecision):
        raise FrontendError(f"training_step: precision must be a slicer.MixedPrecision(param_dtype=..., "
                            f"reduce_dtype=...) or None, got {type(precision).__name__}")


__all__ = ["FLOAT_TYPES", "MixedPrecision", "check_precision"]
