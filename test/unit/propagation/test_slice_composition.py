"""Slice composition into product ranges: the composed program still lowers, runs and partitions."""

import re
from pathlib import Path

import numpy as np
from mlir import ir

import slicer
from slicer.checking import check_equivalent
from slicer.core.names import RANGE_PRODUCT
from slicer.dialect import make_context, walk_ops
from slicer.lowering import compile_function
from slicer.passes import transform
from slicer.runtime import Simulator

LIT = (Path(__file__).resolve().parents[2] / "Transforms" / "slicer-propagate.mlir").read_text()
COMPOSE = '"slicer.mesh"() {sym_name = "mesh", axes = ["x", "y"], shape = array<i64: 2, 4>} : () -> ()\n' + \
    re.search(r"^(func\.func @compose.*?^}\n)", LIT, re.S | re.M).group(1)


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def test_composed_slices_deforest_and_stay_equal():
    with make_context():
        module = ir.Module.parse(COMPOSE)
        slicer.propagate(module, check_each_step=True)
        assert len(list(walk_ops(module, RANGE_PRODUCT))) == 1
        check_equivalent(COMPOSE, str(module), step="composition")


def test_composed_program_partitions_and_simulates():
    spmd = partition(COMPOSE, "slicer-propagate,slicer-partition")
    a = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    # Tile-only partition: bit-identical to the unpartitioned program (same kernels' arithmetic).
    np.testing.assert_array_equal(Simulator(spmd)(a), compile_function(COMPOSE)(a))
