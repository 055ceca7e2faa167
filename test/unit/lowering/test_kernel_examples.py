"""Every example program, compiled by the vectorizing kernel pipeline, equals the reference JIT (numpy for the
realistic-size MLP, see NUMPY_REFERENCES)."""

import re
from pathlib import Path

import numpy as np
import pytest

from slicer.lowering import compile_function, compile_library

EXAMPLES = sorted((Path(__file__).parents[3] / "examples").glob("*.mlir"))


def _mlp(x, w1, b1, w2):
    x, w1, b1, w2 = (a.astype(np.float64) for a in (x, w1, b1, w2))
    return (np.maximum(x @ w1 + b1, 0) @ w2).astype(np.float32)


# Kernels whose reference is numpy (in f64), not the JIT: the JIT runs a matmul as scalar loops, half a minute
# for the realistic-size MLP's 8.6 GFLOP, while the same ops are compared with the JIT at small size (`mlp`).
NUMPY_REFERENCES = {"mlp_large": _mlp}


def random_input(spec, rng):
    if spec.dtype.kind == "f":
        return rng.standard_normal(spec.shape).astype(spec.dtype)
    if spec.dtype.kind == "b":
        return rng.integers(0, 2, spec.shape).astype(bool)
    return rng.integers(-20, 20, spec.shape).astype(spec.dtype)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
@pytest.mark.slow
def test_example_matches_the_jit(path, cache_dir):
    text = path.read_text()
    library = compile_library(text, cache_dir=cache_dir)
    rng = np.random.default_rng(7)
    for kernel in library:
        inputs = [random_input(spec, rng) for spec in kernel.inputs]
        ours = kernel(*inputs)
        if kernel.name in NUMPY_REFERENCES:
            reference = NUMPY_REFERENCES[kernel.name](*inputs)
        else:
            reference = compile_function(text, kernel.name)(*inputs)
        ours = ours if isinstance(ours, tuple) else (ours,)
        reference = reference if isinstance(reference, tuple) else (reference,)
        for got, want in zip(ours, reference):
            np.testing.assert_allclose(
                got, want, rtol=1e-4, atol=absolute_tolerance(want), err_msg=f"{path.name} @{kernel.name}"
            )


def test_numpy_references_name_example_kernels():
    # A renamed example would silently go back to the slow JIT reference: keep this table in step.
    names = {name for path in EXAMPLES for name in re.findall(r"func\.func @(\w+)", path.read_text())}
    assert set(NUMPY_REFERENCES) <= names


def absolute_tolerance(reference):
    """1e-4, or 1e-5 of the largest magnitude for float results that grow with their size.

    The two pipelines sum long contractions in different orders (the kernel in vector lanes and tiles, the
    reference in one chain), so an f32 result of magnitude M near a cancellation differs by about M times
    the rounding error accumulated over K terms; at the realistic MLP (K = 4096, |result| up to ~3e3) that
    is a few 1e-3. A wrong kernel is off by the order of M itself, far above this bound.
    """
    if reference.dtype.kind != "f" or reference.size == 0:
        return 1e-4
    return max(1e-4, 1e-5 * float(np.abs(reference).max()))
