"""`--check-each-step`: run two versions of a program on the same random inputs and compare.

Every intermediate program of Slicer is a correct global program (DESIGN.md
section 1), so each step can be executed through the JIT and compared with the
program before it. A mismatch names the step.
"""

from __future__ import annotations

import numpy as np

from mlir import ir

from slicer.lowering.jit import JitError, compile_function


class StepMismatch(AssertionError):
    """The program after a step computes something else than before it."""


def random_inputs(specs, seed: int = 0) -> list[np.ndarray]:
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
