"""Long collective-free segments are cut into kernels where their content says (lowering/cut.py): kernels stay
below the size limit, the repeated blocks of a deep program give identical kernels (one cache entry each), the
cut is the same in every process (whatever Python's hash seed), and the program still computes the same."""

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from slicer.lowering import KernelNode
from slicer.lowering.aot import split_kernels
from slicer.lowering.cut import MAX_OPS, MIN_OPS, is_compute

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "propagation"))
from test_scaling import HIDDEN, MODEL, ROWS, reference, residual_chain

DEPTH = 60


@functools.cache
def deep_program():
    """Compiled once per process: the tests below only read it."""
    return slicer.compile(residual_chain(DEPTH), mesh={"x": 2}, tactics=slicer.parse_tactics("arg0.0=x"))


def compute_ops(kernel_text: str) -> int:
    from mlir import ir

    from slicer.dialect import make_context, walk_ops

    with make_context():
        module = ir.Module.parse(kernel_text)
        func = next(walk_ops(module, "func.func"))
        return sum(1 for op in func.regions[0].blocks[0].operations if is_compute(op.operation))


@pytest.mark.slow
def test_a_deep_segment_is_cut_into_repeating_kernels():
    prog = deep_program()
    kernels = split_kernels(prog.graph.kernels_mlir)
    assert len(kernels) > 1 and all(compute_ops(k) <= MAX_OPS for k in kernels.values())
    assert len(set(kernels.values())) < len(kernels)  # repeated blocks: repeated kernels
    assert compute_ops(next(iter(kernels.values()))) >= MIN_OPS


def test_a_short_segment_is_not_cut():
    prog = slicer.compile(residual_chain(2), mesh={"x": 2}, tactics=slicer.parse_tactics("arg0.0=x"))
    assert sum(isinstance(n, KernelNode) for n in prog.graph.nodes) == 1


@pytest.mark.slow
def test_the_cut_is_the_same_in_every_process():
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import test_cut; "
              "print(test_cut.deep_program().graph.kernels_mlir)")
    runs = [subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)], capture_output=True, text=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300) for seed in ("1", "2")]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout == deep_program().graph.kernels_mlir + "\n"


@pytest.mark.slow
def test_the_cut_program_equals_numpy():
    prog = deep_program()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((ROWS, MODEL)).astype(np.float32)]
    for _ in range(DEPTH):
        arrays += [(rng.standard_normal((MODEL, HIDDEN)) / 8).astype(np.float32),
                   (rng.standard_normal((HIDDEN, MODEL)) / 8).astype(np.float32)]
    np.testing.assert_allclose(prog.run(*arrays), reference(arrays), rtol=1e-4, atol=1e-4)
