"""Requested boundary shardings on random meshes and types: partition emits the synthesizer's plan (every step
kind: local slices, all_gather, multi-axis all_to_all, slicer.permute, all_reduce, reduce_scatter) and the
simulated program returns exactly its input (times the size of the summed axis for partial sources)."""

import random

import numpy as np
import pytest

from slicer.passes import transform
from slicer.redistribution import DistType, Mesh, RedistributionError
from slicer.runtime.simulation.oracle import compare

MESHES = [(("x", 2), ("y", 2)), (("x", 2), ("y", 4)), (("x", 4), ("y", 2)), (("x", 2), ("y", 2), ("z", 2))]
SHAPES = [(8, 16), (8, 8, 4)]


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def random_dims(rng: random.Random, mesh: Mesh, shape, exclude=()) -> tuple:
    dims = [[] for _ in shape]
    for axis in mesh.axis_names:
        if axis in exclude:
            continue
        choice = rng.randrange(len(shape) + 1)
        if choice < len(shape):
            dims[choice].insert(rng.randrange(len(dims[choice]) + 1), axis)
    return tuple(tuple(d) for d in dims)


def sharding(dims) -> str:
    return "[" + ", ".join("[" + ", ".join(f'"{a}"' for a in d) + "]" for d in dims) + "]"


def case(seed: int):
    rng = random.Random(seed)
    while True:
        axes = rng.choice(MESHES)
        mesh = Mesh(list(axes))
        shape = rng.choice(SHAPES)
        summed = rng.choice([None] + list(mesh.axis_names)) if seed % 3 == 0 else None
        src = random_dims(rng, mesh, shape, exclude=(summed,) if summed else ())
        dst = random_dims(rng, mesh, shape)
        try:
            DistType.of(mesh, shape, src)
            DistType.of(mesh, shape, dst)
        except RedistributionError:
            continue
        if src != dst or summed:
            return mesh, shape, src, dst, summed


def program(mesh: Mesh, shape, src, dst, summed) -> str:
    names = ", ".join(f'"{a}"' for a in mesh.axis_names)
    sizes = ", ".join(str(s) for s in mesh.shape)
    t = "tensor<" + "x".join(map(str, shape)) + "xf32>"
    head = (f'"slicer.mesh"() {{sym_name = "mesh", axes = [{names}], shape = array<i64: {sizes}>}} : () -> ()\n'
            f"func.func @f(%a: {t} {{slicer.sharding = #slicer.sharding<@mesh, {sharding(src)}>}})\n"
            f"    -> ({t} {{slicer.sharding = #slicer.sharding<@mesh, {sharding(dst)}>}}) {{\n")
    if summed is None:
        return head + f"  return %a : {t}\n}}\n"
    return head + (f'  %s = "slicer.loop"() ({{\n  ^bb0(%r: !slicer.range<"{summed}", {mesh.size(summed)}>):\n'
                   f"    tosa.yield %a : {t}\n  }}) {{action = #slicer.sum, mesh = @mesh}} : () -> {t}\n"
                   f"  return %s : {t}\n}}\n")


@pytest.mark.parametrize("seed", range(36))
def test_random_reshard(seed):
    mesh, shape, src, dst, summed = case(seed)
    text = program(mesh, shape, src, dst, summed)
    spmd = partition(text)
    result = compare(text, spmd, seed=seed)
    (expected,), (actual,) = result.expected, result.actual
    if summed is None:
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-5)


def test_cases_cover_every_step_kind():
    kinds = set()
    for seed in range(36):
        spmd = partition(program(*case(seed)))
        for op in ("all_gather", "all_to_all", "all_reduce", "reduce_scatter", "slicer.permute", "extract_slice"):
            if op in spmd:
                kinds.add(op)
    assert kinds == {"all_gather", "all_to_all", "all_reduce", "reduce_scatter", "slicer.permute", "extract_slice"}
