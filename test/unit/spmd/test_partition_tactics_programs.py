"""Every example x strategy of the tactics issue, partitioned and run by the SPMD simulator, equals the original.

Programs (examples/: MLP, batch matmul, row sums, attention, layer norm, reshapes, transpose; and a softmax): the
tactics are applied (`slicer.apply_tactics`), optionally propagated (`slicer-propagate`), partitioned
(`slicer-partition`) and simulated for every device of meshes with 1, 2, 4 and 8 devices (1-D meshes for one-axis
strategies, 2-D for two-axis ones, 2x2x2 for a three-axis one), on random data. Partitions made only of tile loops must
give bit-identical results (each device runs the same arithmetic on its block); partial sums are compared with a tight
tolerance.
"""

from functools import cache
from pathlib import Path

import numpy as np
import pytest
from test_partition_examples import round_trip

import slicer
from slicer.checking import random_inputs
from slicer.lowering import compile_function
from slicer.passes import transform
from slicer.runtime.simulation.oracle import compare

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

SOFTMAX = (EXAMPLES / "softmax.mlir").read_text()

T, R = slicer.Tile, slicer.Replicate
ONE_D = [1, 2, 4, 8]
TWO_D = [(1, 2), (2, 2), (2, 4), (4, 2)]
# (program, strategy) -> (tactics, meshes)
CASES = {
    ("mlp", "data"): ([T(arg=0, dim=0, axes="x")], [{"x": n} for n in ONE_D]),
    ("mlp", "megatron"): ([T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y")], [{"y": n} for n in ONE_D]),
    ("mlp", "2d"): ([T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y"), T(arg=3, dim=0, axes="y"), R(arg=2)],
                    [{"x": a, "y": b} for a, b in TWO_D]),
    ("batch_matmul", "data"): ([T(arg=0, dim=0, axes="x"), T(arg=1, dim=0, axes="x")], [{"x": n} for n in ONE_D[:3]]),
    ("batch_matmul",
     "2d"): ([T(arg=0, dim=0, axes="x"), T(arg=1, dim=2, axes="y"), T(result=0, dim=1, axes=("y", "x"))],
                             [{"x": a, "y": b} for a, b in TWO_D]),
    ("batch_matmul", "3d"): ([T(arg=0, dim=0, axes="x"), T(arg=1, dim=0, axes="x"), T(arg=1, dim=2, axes="y"),
                              T(arg=0, dim=2, axes="z"), T(arg=1, dim=1, axes="z")], [{"x": 2, "y": 2, "z": 2}]),
    ("reduction", "rows"): ([T(arg=0, dim=0, axes="x")], [{"x": n} for n in ONE_D]),
    ("reduction", "2d"): ([T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(result=0, dim=0, axes=("x", "y"))],
                          [{"x": a, "y": b} for a, b in TWO_D]),
    ("attention", "rows"): ([T(arg=0, dim=0, axes="x")], [{"x": n} for n in ONE_D]),
    ("attention", "heads-like"): ([T(arg=0, dim=1, axes="y"), T(arg=1, dim=1, axes="y"),
                                   T(arg=2, dim=0, axes=("x", "y"))], [{"x": a, "y": b} for a, b in TWO_D]),
    ("layernorm", "2d"): ([T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(arg=1, dim=0, axes="y"), R(arg=2)],
                          [{"x": a, "y": b} for a, b in TWO_D]),
    ("reshape", "rows"): ([T(arg=0, dim=0, axes="x"), T(result=0, dim=0, axes=("x", "y"))],
                          [{"x": a, "y": b} for a, b in TWO_D]),
    ("transpose", "2d"): ([T(arg=0, dim=0, axes="x"), T(arg=1, dim=1, axes="y")], [{"x": a, "y": b} for a, b in TWO_D]),
    ("softmax", "rows"): ([T(arg=0, dim=0, axes="x"), R(result=0)], [{"x": n} for n in ONE_D]),
    ("softmax", "2d"): ([T(arg=0, dim=0, axes="x"), T(arg=0, dim=1, axes="y"), T(result=0, dim=1, axes="x")],
                        [{"x": a, "y": b} for a, b in TWO_D]),
}


def partition_text(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def program(name: str) -> str:
    return SOFTMAX if name == "softmax" else (EXAMPLES / f"{name}.mlir").read_text()


@cache
def reference(name: str):
    fn = compile_function(program(name))
    return fn, random_inputs(fn.inputs, seed=len(name))


def loop_program(name: str, strategy: str, mesh: dict, propagate: bool) -> str:
    tactics, _ = CASES[(name, strategy)]
    module = slicer.apply_tactics(program(name), tactics, mesh=mesh)
    text = str(module)
    return partition_text(text, "slicer-propagate") if propagate else text


def _params():
    for (name, strategy), (_, meshes) in CASES.items():
        for mesh in meshes:
            label = "x".join(f"{a}{n}" for a, n in mesh.items())
            for propagate in (False, True):
                yield pytest.param(name, strategy, mesh, propagate,
                                   id=f"{name}-{strategy}-{label}-{'propagated' if propagate else 'tactics'}")


@pytest.mark.parametrize("name, strategy, mesh, propagate", list(_params()))
@pytest.mark.slow
def test_partitioned_program_equals_original(name, strategy, mesh, propagate):
    loops = loop_program(name, strategy, mesh, propagate)
    spmd = partition_text(loops)
    assert "slicer.loop" not in spmd and "slicer.slice" not in spmd
    fn, inputs = reference(name)
    result = compare(program(name), spmd, inputs=inputs, reference=fn)
    round_trip(spmd)  # plain mlir-opt reads it
    has_sum = "#slicer.sum" in loops
    if has_sum:
        for e, a in zip(result.expected, result.actual):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    else:
        assert result.exact, f"tile-only partition differs by {result.max_error}"
