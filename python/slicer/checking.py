"""Checking programs by running them: every intermediate program of Slicer is a correct global program
(docs/propagation.md), so each step can be executed and compared with the program before it.

- `check_equivalent(before, after, step=...)`: `--check-each-step`; both programs through the JIT on the same
  random inputs; a mismatch raises `StepMismatch` naming the step.
- `compare(original, spmd)`: the test oracle of partitioning: the original through the JIT, the SPMD
  function through the in-process simulator (`slicer.runtime.SpmdProgram`), on the same random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir

from slicer.core.errors import JitError, StepMismatch
from slicer.lowering import compile_function
from slicer.runtime import SpmdProgram


def random_inputs(specs, seed: int = 0) -> list[np.ndarray]:
    """Random arrays for `specs` (objects with `.shape` and `.dtype`, e.g. a compiled function's `.inputs`)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        if np.issubdtype(spec.dtype, np.floating):
            arrays.append(rng.standard_normal(spec.shape).astype(spec.dtype))
        elif spec.dtype == np.bool_:
            arrays.append(rng.integers(0, 2, spec.shape).astype(np.bool_))
        else:
            arrays.append(rng.integers(-8, 8, spec.shape).astype(spec.dtype))
    return arrays


def check_equivalent(before: str, after: str, *, step: str, entry: str | None = None, seed: int = 0,
                     rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Raise StepMismatch if `after` does not compute what `before` does on random inputs."""
    reference = compile_function(before, entry)
    try:
        candidate = compile_function(after, entry)
    except (ir.MLIRError, JitError) as exc:
        detail = next((line.strip() for line in str(exc).splitlines() if "error:" in line), str(exc).strip())
        raise StepMismatch(f"after {step}: the program no longer compiles: {detail}") from None
    inputs = random_inputs(reference.inputs, seed)
    expected, got = reference(*inputs), candidate(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for index, (e, g) in enumerate(zip(expected, got)):
        exact = not np.issubdtype(e.dtype, np.floating)
        scale = max(1.0, float(np.max(np.abs(e)))) if e.size else 1.0
        if (exact and not np.array_equal(e, g)) or (not exact and not np.allclose(e, g, rtol=rtol, atol=atol * scale)):
            worst = float(np.max(np.abs(e.astype(np.float64) - g.astype(np.float64)))) if e.size else 0.0
            raise StepMismatch(f"after {step}: result #{index} of @{reference.name} differs from before the step (max |diff| {worst:.3g})")


@dataclass(frozen=True)
class Comparison:
    inputs: tuple
    expected: tuple
    actual: tuple

    @property
    def max_error(self) -> float:
        return max((float(np.max(np.abs(e.astype(np.float64) - a.astype(np.float64)))) if e.size else 0.0)
                   for e, a in zip(self.expected, self.actual))

    @property
    def exact(self) -> bool:
        return all(np.array_equal(e, a) for e, a in zip(self.expected, self.actual))


def compare(original, spmd, *, entry: str | None = None, seed: int = 0, inputs=None,
            reference=None) -> Comparison:
    """Run `original` (JIT) and `spmd` (simulator) on the same random inputs; `reference` may pass an
    already compiled original to save a compile."""
    fn = reference or compile_function(original if isinstance(original, str) else str(original), entry)
    inputs = tuple(inputs) if inputs is not None else tuple(random_inputs(fn.inputs, seed))
    expected = fn(*inputs)
    actual = SpmdProgram(spmd, entry)(*inputs)
    as_tuple = lambda x: x if isinstance(x, tuple) else (x,)  # noqa: E731
    return Comparison(inputs, as_tuple(expected), as_tuple(actual))
