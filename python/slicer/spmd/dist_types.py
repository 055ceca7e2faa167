"""Distributed types of SSA values during SPMD partitioning, and their textual attribute form.

A value's distributed type is a `slicer.redistribution.DistType`: its global shape (the shape the value has
in the loop program, i.e. inside loops the shape of the loop body's block), for every dim the mesh axes tiling
it **major to minor**, and the axes over which it is a partial sum. The local (per-device) shape is the global
shape divided by the tiling.

Inside `slicer.loop` bodies a value is one member of a family indexed by the loop's range; the device whose
coordinate on the loop axes is `r` computes member `r`. The loop axes (the *context*) therefore never appear in
a value's type: its type describes how the devices that share a context coordinate hold that member. A use in a
deeper context first drops the axes of the new loops from the type (gathers / reductions), see
`slicer.spmd.partitioner`.

In the SPMD output every value carries its type as a string attribute (`slicer.dist`: on ops one string per
result, on function arguments and results in `arg_attrs`/`res_attrs`), in the text form of the redistribution
package (`[[x],[]] partial=[y]`, plus `varying=[...]` for the loop axes of values computed in loop bodies,
see `dist_text`), so the output is self-describing and parses with plain `mlir-opt`.
"""

from __future__ import annotations

from collections.abc import Iterable

from mlir import ir

from slicer.redistribution import DistType, Mesh, parse_type_text, subaxes


def replicated(shape: Iterable[int]) -> DistType:
    shape = tuple(shape)
    return DistType(shape, tuple(() for _ in shape), ())


def without_axes(t: DistType, axes: Iterable[str]) -> DistType:
    """`t` with `axes` removed from every dim and from the partial set (the type after gathering/reducing them)."""
    drop = set(axes)
    return DistType(t.shape, tuple(tuple(a for a in d if a not in drop) for d in t.dims),
                    tuple(a for a in t.partial if a not in drop))


def with_major(t: DistType, dim: int, axes: tuple[str, ...]) -> DistType:
    """`t` with `axes` put in front (as the major tiles) of dim `dim`; they must not be used elsewhere."""
    rest = tuple(a for a in t.dims[dim] if a not in axes)
    return DistType(t.shape, tuple(axes + rest if i == dim else d for i, d in enumerate(t.dims)), t.partial)


VARYING = " varying="  # the text form's loop-axes part: `[[x],[]] varying=[y]`


def dist_text(t: DistType, context: Iterable[str] = ()) -> str:
    """The `slicer.dist` text of `t`; values computed inside loop bodies add `varying=[axes]`: devices that
    differ on those axes hold different members of the loop's family (e.g. the partial products of a sum
    loop before the all_reduce are `[[],[]] varying=[y]`). `parse_dist_text` and `varying_axes` read it."""
    context = sorted(context)
    return t.text() + (VARYING + "[" + ",".join(context) + "]" if context else "")


def parse_dist_text(text: str, local_shape: tuple[int, ...], mesh: Mesh) -> DistType:
    """The type of a `slicer.dist` text (`dist_text`; its `varying=[...]` part dropped), with the global
    shape recovered from the local one."""
    dims, partial = parse_type_text(text.split(VARYING)[0])
    shape = tuple(n * subaxes.group_size(mesh, d) for n, d in zip(local_shape, dims))
    return DistType.of(mesh, shape, dims, partial)


def varying_axes(text: str) -> tuple[str, ...]:
    """The `varying=[...]` axes of a `slicer.dist` text (values computed in loop bodies), else ()."""
    _, found, tail = text.partition(VARYING)
    return parse_type_text(f"[{tail}]")[0][0] if found else ()


def local_type(t: DistType, mesh: Mesh, element_type: ir.Type) -> ir.RankedTensorType:
    return ir.RankedTensorType.get(list(t.local_shape(mesh)), element_type)


def tensor_shape(value: ir.Value) -> tuple[int, ...] | None:
    """The static shape of a ranked tensor value, or None for any other value."""
    t = value.type
    if isinstance(t, ir.RankedTensorType) and t.has_static_shape:
        return tuple(t.shape)
    return None
