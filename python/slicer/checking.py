"""Checking a step by running it: every intermediate program of Slicer is a correct global program
(docs/propagation.md), so each step can be executed and compared with the program before it.

- `check_equivalent(before, after, step=...)`: `--check-each-step`; both programs through the JIT on the same
  random inputs; a mismatch raises `StepMismatch` naming the step.
- `random_inputs(specs, seed)`: the random arrays every check feeds its programs.

Results are compared by the one rule of `slicer.core.compare` (exact integers, close floats, NaN equal to NaN).
This layer sits just above `slicer.lowering` (it needs the JIT) and below `slicer.passes`, which call it; the
partitioning oracle that also runs the SPMD program in the simulator is `slicer.runtime.simulation.oracle.compare`.
"""

from __future__ import annotations

import numpy as np
from mlir import ir

from slicer.core import dtypes
from slicer.core.compare import ATOL, RTOL, max_difference, same_result
from slicer.core.errors import JitError, StepMismatch
from slicer.lowering import compile_function


def random_inputs(specs, seed: int = 0) -> list[np.ndarray]:
    """Random arrays for `specs` (objects with `.shape` and `.dtype`, e.g. a compiled function's `.inputs`)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        if dtypes.is_float(spec.dtype):
            arrays.append(rng.standard_normal(spec.shape).astype(spec.dtype))
        elif spec.dtype == np.bool_:
            arrays.append(rng.integers(0, 2, spec.shape).astype(np.bool_))
        else:
            arrays.append(rng.integers(-8, 8, spec.shape).astype(spec.dtype))
    return arrays


def as_tuple(results) -> tuple:
    """A function's results as a tuple (a single result is returned bare by the JIT and the simulator)."""
    return results if isinstance(results, tuple) else (results,)


def check_equivalent(before: str, after: str, *, step: str, entry: str | None = None, seed: int = 0,
                     rtol: float = RTOL, atol: float = ATOL) -> None:
    """Raise StepMismatch if `after` does not compute what `before` does on random inputs."""
    reference = compile_function(before, entry)
    try:
        candidate = compile_function(after, entry)
    except (ir.MLIRError, JitError) as exc:
        detail = next((line.strip() for line in str(exc).splitlines() if "error:" in line), str(exc).strip())
        raise StepMismatch(f"after {step}: the program no longer compiles: {detail}") from None
    inputs = random_inputs(reference.inputs, seed)
    expected, got = as_tuple(reference(*inputs)), as_tuple(candidate(*inputs))
    for index, (e, g) in enumerate(zip(expected, got)):
        if not same_result(e, g, rtol=rtol, atol=atol):
            raise StepMismatch(f"after {step}: result #{index} of @{reference.name} differs from before the step "
                               f"(max |diff| {max_difference(e, g):.3g})")
