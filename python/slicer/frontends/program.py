"""An imported program: MLIR text whose arguments carry names, plus the values bound to its parameters.

`slicer.from_torch` returns one; `slicer.compile` accepts it like text, and the compiled `Program` then runs on
the model's inputs alone (the parameters are bound). Nothing here imports torch: a torch tensor is recognised
by its methods (`as_array`), so this layer stays importable without the optional dependency.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slicer.core.arrays import as_array
from slicer.core.errors import RunError, UnknownName

#: What an argument of an imported program is: a model input or a batch tensor ("input"), a parameter of the
#: module ("parameter", `model.named_parameters()`), a buffer ("buffer", `named_buffers()`), or optimizer state
#: ("state": `momentum.<param>`, `exp_avg.<param>`, `exp_avg_sq.<param>`, `step`), or a hyperparameter of the
#: optimizer ("hyper": `lr`, `weight_decay`, ..., a float64 scalar a session sets before each step).
ARG_ROLES = ("input", "parameter", "buffer", "state", "hyper")


@dataclass(frozen=True)
class ImportedProgram:
    """A program imported from a framework: `text` (linalg-on-tensors MLIR) whose entry function `entry` takes
    the model's inputs, then its parameters and buffers, each argument named (`slicer.name`) as `arg_names` says.

    `parameters` are the values bound to the arguments after the inputs (the module's own tensors, read when the
    program runs, so in-place updates of the module are seen). Tactics may name any argument, e.g.
    `slicer.Tile(arg="mlp.fc1.weight", dim=0, axes="y")`.

    `result_names` name the results when the import names them (a training step: "loss", then the new
    parameters and optimizer state under their arguments' names; `slicer.name` in the function's `res_attrs`
    too); a result named like an argument is that argument's next value (a session replaces it in place).
    `arg_roles` says what each argument is, one of `ARG_ROLES` (empty: not known). `hyperparameters`, for a
    step with "hyper" arguments, gives their values at a step number: `hyperparameters(step, given)` -> name ->
    float, `given` (`session.step(lr=...)`) first, else the optimizer's setting or schedule (InputError for an
    unknown name or a bad value); the bound values are those of step 0."""

    text: str
    arg_names: tuple[str, ...]
    num_inputs: int
    parameters: tuple[Any, ...]
    entry: str
    source: str = "an imported program"
    result_names: tuple[str, ...] = ()
    arg_roles: tuple[str, ...] = ()
    hyperparameters: Callable[..., dict[str, float]] | None = None
    origin: Any = field(default=None, compare=False, repr=False)  # training_step's StepOrigin (pipelining)
    input_order: tuple[tuple[int, int, np.ndarray], ...] = field(default=(), compare=False, repr=False)
    """(input index, dim, order): the program takes that dim of that input in `order` (a context-parallel step
    load-balanced: `context_import.py`); `bind` and `arrange` permute the batch so."""

    def names_with_role(self, role: str) -> tuple[str, ...]:
        """The names of the arguments whose role is `role` (one of `ARG_ROLES`)."""
        if role not in ARG_ROLES:
            raise UnknownName(f"unknown argument role {role!r}; one of {', '.join(ARG_ROLES)}")
        return tuple(n for n, r in zip(self.arg_names, self.arg_roles) if r == role)

    @property
    def input_names(self) -> tuple[str, ...]:
        return self.arg_names[: self.num_inputs]

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return self.arg_names[self.num_inputs :]

    def bind(self, inputs: Sequence[Any]) -> list[np.ndarray]:
        """Every argument of the program: `inputs` (the model's inputs, numpy arrays or torch tensors), then
        the bound parameters; RunError if the number of inputs is wrong."""
        if len(inputs) != self.num_inputs:
            names = ", ".join(self.input_names) or "none"
            raise RunError(f"{self.source} takes {self.num_inputs} input(s) ({names}); got {len(inputs)} "
                           "(its parameters are bound: pass the inputs only)")
        arranged = self.arrange([as_array(v) for v in inputs])
        return [arranged.get(i, as_array(v)) for i, v in enumerate(inputs)] + [as_array(v) for v in self.parameters]

    def arrange(self, inputs: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
        """{input index: the input in the order the program takes it} for the inputs `input_order` permutes."""
        return {i: np.take(inputs[i], order, axis=dim) for i, dim, order in self.input_order if i < len(inputs)}

    def __str__(self) -> str:
        return self.text


__all__ = ["ARG_ROLES", "ImportedProgram", "as_array"]
