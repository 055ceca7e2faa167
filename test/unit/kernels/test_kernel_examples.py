"""Every example program, compiled by the vectorizing kernel pipeline, equals the reference JIT."""

from pathlib import Path

import numpy as np
import pytest

from slicer.lowering import compile_function, compile_library

EXAMPLES = sorted((Path(__file__).parents[3] / "examples").glob("*.mlir"))


def random_input(spec, rng):
    if spec.dtype.kind == "f":
        return rng.standard_normal(spec.shape).astype(spec.dtype)
    if spec.dtype.kind == "b":
        return rng.integers(0, 2, spec.shape).astype(bool)
    return rng.integers(-20, 20, spec.shape).astype(spec.dtype)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_matches_the_jit(path, cache_dir):
    text = path.read_text()
    library = compile_library(text, cache_dir=cache_dir)
    rng = np.random.default_rng(7)
    for kernel in library:
        inputs = [random_input(spec, rng) for spec in kernel.inputs]
        ours = kernel(*inputs)
        reference = compile_function(text, kernel.name)(*inputs)
        ours = ours if isinstance(ours, tuple) else (ours,)
        reference = reference if isinstance(reference, tuple) else (reference,)
        for got, want in zip(ours, reference):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{path.name} @{kernel.name}")
