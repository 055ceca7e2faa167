"""Tile and vectorize the linalg ops of bufferized kernels with the transform dialect.

Upstream MLIR 22 has no pass that tiles linalg ops (the old `linalg-tile` is
gone); tiling and vectorization are transform-dialect ops. So this module
writes one transform script per module from the ops it finds and applies it
with the upstream interpreter (`transform.interpreter.apply_named_sequence`); its steps: docs/module-notes.md,
`lowering/vectorize.py`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg, transform
from mlir.dialects.transform import interpreter

from slicer.core.linalg_facts import PARALLEL, REDUCTION, indexing_maps, iterator_kinds, loop_dim
from slicer.core.names import VECTORIZE_TAG_ATTR as TAG
from slicer.core.operations import walk_ops

log = logging.getLogger("slicer.kernels")

_GENERIC = linalg.GenericOp.OPERATION_NAME


@dataclass(frozen=True)
class VectorizeOptions:
    """Tile sizes: `parallel` for the innermost loop of non-contractions, `matmul` (i, j, k) for contractions,
    `kc` the reduction block of contractions (outer tiling level). A size of 0 leaves that loop untiled. The
    fields are the options of `slicer-kernel-vectorize` (typed parsing: `matmul=8,32,16` takes three integers)."""

    parallel: int = 64
    matmul: tuple[int, int, int] = (8, 32, 16)
    kc: int = 256
    transpose: int = 16


@dataclass(frozen=True)
class TileLevel:
    """One `tile_using_for`: a tile size per loop (0 = not tiled) and the order of the tile loops."""

    sizes: tuple[int, ...]
    interchange: tuple[int, ...]


@dataclass(frozen=True)
class TilePlan:
    """The tiling levels of one op (outer level first), identified by its tag."""

    tag: int
    levels: tuple[TileLevel, ...]


def loop_ranges(op: ir.Operation) -> list[int] | None:
    """Static trip count of each loop of a linalg.generic, read from the operand dims indexed by a plain loop
    dim, or None if a loop has no such dim or a dynamic one. (A dim indexed by `d0 + d1` tells no range, but
    the other operands may: a convolution's loops are all known.)"""
    maps = indexing_maps(op)
    if not maps:
        return None
    ranges: list[int | None] = [None] * maps[0].n_dims
    for operand, amap in zip(op.operands, maps):
        shape = getattr(operand.type, "shape", None)
        if shape is None:
            continue  # a scalar operand (linalg.fill's value)
        for size, expr in zip(shape, amap.results):
            dim = loop_dim(expr)
            if dim is not None:
                ranges[dim] = size
    if any(r is None or r < 0 for r in ranges):
        return None
    return ranges  # type: ignore[return-value]


def plan_tiles(op: ir.Operation, tag: int, options: VectorizeOptions) -> TilePlan | None:
    ranges = loop_ranges(op)
    if not ranges or _has_i1_operand(op):
        return None  # unknown extents, a 0-d op (nothing to tile), or i1 buffers
    kinds = iterator_kinds(op)
    parallel = [i for i, k in enumerate(kinds) if k == PARALLEL]
    reduction = [i for i, k in enumerate(kinds) if k == REDUCTION]
    if not parallel and _broadcast_input(op, len(kinds)):
        # A reduction of everything to one element, one input not walking every loop (sum(x * w) with w
        # broadcast over a dim of x): its vectorized multi-reduction becomes a vector.contract that MLIR 22's
        # contraction lowering aborts on (a failed cast in `lowerParallel`: the process dies, no error to
        # catch). It stays a scalar loop nest.
        return None
    order = list(range(len(ranges)))
    if len(parallel) >= 2 and reduction:
        i, j, k = parallel[-2], parallel[-1], reduction[-1]
        ti, tj, tk = options.matmul
        # Level 1: a tj-wide column panel of the result, the reduction in blocks of kc; the kc x tj
        # block of B then stays in cache while every row tile runs over it (loops j, kb, i, k).
        outer = [0] * len(ranges)
        outer[j], outer[k] = tj, options.kc
        inner = [1] * len(ranges)
        inner[i], inner[j], inner[k] = ti, 0, tk
        for d in parallel[:-2] + reduction[:-1]:  # batch dims and other reductions: one at a time
            outer[d], inner[d] = 1, 0
        outer_order = [j, k] + [d for d in order if d not in (j, k)]
        levels = [(outer, outer_order), (inner, order)]
    else:
        wanted = [1] * len(ranges)
        wanted[-1] = options.parallel
        across = _transposed_loop(op, kinds)
        if across is not None:
            # An operand read across its rows (a transpose): square blocks, so that each block reads whole
            # cache lines of a few rows and its vector.transpose becomes shuffles. Tiles of the innermost loop
            # alone read one element per row, 64 rows apart: a fraction of a copy's bandwidth.
            wanted[-1] = wanted[across] = options.transpose
        levels = [(wanted, order)]
    result = []
    extent = list(ranges)
    for sizes, loop_order in levels:
        clamped = tuple(0 if s == 0 or s >= e else s for s, e in zip(sizes, extent))
        if any(clamped):
            result.append(TileLevel(clamped, tuple(loop_order)))
        extent = [c if c else e for c, e in zip(clamped, extent)]
    return TilePlan(tag, tuple(result))


def _transposed_loop(op: ir.Operation, kinds) -> int | None:
    """The parallel loop an input walks contiguously (its last dim) where the result's last dim is another
    loop, the innermost: a transposed read; None when every input walks the result's innermost loop along its
    rows (or does not walk it at all: a broadcast)."""
    maps = indexing_maps(op)
    if not maps or not maps[-1].results:
        return None
    inner = loop_dim(maps[-1].results[-1])
    if inner is None or inner != len(kinds) - 1:
        return None
    found = None
    for amap in maps[:-1]:
        if len(amap.results) < 2:
            continue
        dims = [loop_dim(e) for e in amap.results]
        last = dims[-1]
        if last is not None and last != inner and kinds[last] == PARALLEL and inner in dims:
            found = last if found is None else max(found, last)
    return found


def _broadcast_input(op: ir.Operation, loops: int) -> bool:
    """An input of `op` does not walk every one of its `loops` loops."""
    maps = indexing_maps(op)
    return any({loop_dim(e) for e in amap.results} != set(range(loops)) for amap in maps[:-1])


def _has_i1_operand(op: ir.Operation) -> bool:
    # memref<Nxi1> holds one byte per element, but a vector<Nxi1> load/store is bit-packed: vectorizing
    # would read and write the wrong bytes (measured: wrong booleans). Such ops stay scalar loops.
    for operand in op.operands:
        element = getattr(operand.type, "element_type", operand.type)
        if isinstance(element, ir.IntegerType) and element.width == 1:
            return True
    return False


def _op_script(plan: TilePlan) -> str:
    """Tile the tagged op level by level; try to peel every tile loop so main tiles are static.

    Every step sits in its own `failures(suppress)` sequence: peeling a loop whose range is a
    multiple of its step fails harmlessly, and an op the tiler rejects stays as it is (loops later).
    Between levels, canonicalization folds the peeled tiles' sizes to constants, and the tag (copied
    onto every peeled clone) finds all the pieces again. It runs on the functions holding the op only: on
    the whole module it made a module of n kernels cost O(n^2) (kernels are built in groups; the same code
    either way, measured on the 75 kernels of a training step).
    """
    loop_type = '!transform.op<"scf.for">'
    tag = plan.tag
    lines = []
    for level, tile in enumerate(plan.levels):
        tiled = sum(1 for s in tile.sizes if s)
        lines += [
            f"    %m{tag}_{level} = transform.structured.match attributes {{{TAG} = {tag} : i64}} in %root "
            ": (!transform.any_op) -> !transform.any_op",
            f"    %f{tag}_{level} = transform.get_parent_op %m{tag}_{level} {{deduplicate, op_name = \"func.func\"}} "
            ": (!transform.any_op) -> !transform.any_op",
            f"    transform.foreach %m{tag}_{level} : !transform.any_op {{",
            "    ^bb0(%op: !transform.any_op):",
            "      transform.sequence %op : !transform.any_op failures(suppress) {",
            "      ^bb0(%o: !transform.any_op):",
            f"        %t, %l:{tiled} = transform.structured.tile_using_for %o tile_sizes "
            f"[{', '.join(map(str, tile.sizes))}] interchange = [{', '.join(map(str, tile.interchange))}] "
            ": (!transform.any_op) -> (!transform.any_op" + f", {loop_type}" * tiled + ")",
        ]
        # Innermost first: peeling keeps the peeled loop's handle valid and duplicates the inner loops.
        for index in reversed(range(tiled)):
            lines += [
                f"        transform.sequence %l#{index} : {loop_type} failures(suppress) {{",
                f"        ^bb0(%loop: {loop_type}):",
                f"          %main, %rest = transform.loop.peel %loop : ({loop_type}) -> (!transform.any_op, "
                "!transform.any_op)",
                "          transform.yield",
                "        }",
            ]
        lines += ["        transform.yield", "      }", "    }", _CANONICALIZE.format(functions=f"%f{tag}_{level}")]
    # Vectorize only the pieces of planned ops; a piece whose shape is still dynamic fails and stays.
    lines += [
        f"    %v{tag} = transform.structured.match attributes {{{TAG} = {tag} : i64}} in %root "
        ": (!transform.any_op) -> !transform.any_op",
        f"    transform.foreach %v{tag} : !transform.any_op {{",
        "    ^bb0(%op: !transform.any_op):",
        "      transform.sequence %op : !transform.any_op failures(suppress) {",
        "      ^bb0(%o: !transform.any_op):",
        "        transform.structured.vectorize %o : !transform.any_op",
        "        transform.yield",
        "      }",
        "    }",
    ]
    return "\n".join(lines)


_CANONICALIZE = """\
    transform.apply_patterns to {functions} {{
      transform.apply_patterns.canonicalization
    }} {{max_iterations = 16 : i64, max_num_rewrites = 100000 : i64}} : !transform.any_op"""


_TAIL = """\
    %vf = transform.structured.match ops{["func.func"]} in %root : (!transform.any_op) -> !transform.any_op
    // What vectorize_children_and_apply_patterns adds after vectorizing: multi-reductions of products
    // become vector.contract. (That op is not used because it vectorizes every static linalg op, also
    // the ones left out on purpose: i1 operands, untiled big ops.)
    transform.apply_patterns to %vf {
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.canonicalization
    } {max_iterations = 16 : i64, max_num_rewrites = 100000 : i64} : !transform.any_op
    transform.apply_patterns to %vf {
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.transfer_permutation_patterns
      transform.apply_patterns.vector.lower_multi_reduction lowering_strategy = "innerparallel"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.canonicalization
    } {max_iterations = 16 : i64, max_num_rewrites = 100000 : i64} : !transform.any_op
    // Separate, without canonicalization: together they rewrite each other's output forever
    // (measured: a transpose feeding a matmul never reached a fixpoint). A transposed block of 16x16 f32
    // (`_transposed_loop`) first, by the shuffle sequence made for it (AVX-512's 16 lanes; LLVM splits it
    // elsewhere): 256x512 in 18 us against 29 us by 1-D shuffles; every other transpose by 1-D shuffles.
    transform.apply_patterns to %vf {
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_16x16"
    } {max_iterations = 16 : i64, max_num_rewrites = 100000 : i64} : !transform.any_op
    transform.apply_patterns to %vf {
      transform.apply_patterns.vector.lower_transpose lowering_strategy = "shuffle_1d"
      transform.apply_patterns.vector.lower_shape_cast
    } {max_iterations = 16 : i64, max_num_rewrites = 100000 : i64} : !transform.any_op
    %hoisted = transform.structured.hoist_redundant_vector_transfers %vf : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
"""


def transform_script(plans: list[TilePlan]) -> str:
    """The transform module tiling, peeling and vectorizing the tagged ops."""
    head = (
        "module attributes {transform.with_named_sequence} {\n"
        "  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.readonly}) {\n"
    )
    body = "\n".join(_op_script(p) for p in plans)
    return head + (body + "\n" if body else "") + _TAIL


def vectorize_module(module: ir.Module, options: VectorizeOptions = VectorizeOptions()) -> None:
    """Tile and vectorize every linalg.generic of `module` in place (best effort, always correct)."""
    context = module.context
    plans: list = []
    i64 = ir.IntegerType.get_signless(64, context)
    for op in walk_ops(module, _GENERIC):
        plan = plan_tiles(op, len(plans), options)
        if plan is not None:
            op.attributes[TAG] = ir.IntegerAttr.get(i64, plan.tag)
            plans.append(plan)
    backup = module.operation.clone()
    try:
        script = ir.Module.parse(transform_script(plans), context)
        entry = next(op for op in script.body.operations
                     if op.operation.name == transform.NamedSequenceOp.OPERATION_NAME)
        interpreter.apply_named_sequence(module, entry, script)
    except (ir.MLIRError, ValueError) as exc:  # the interpreter binding raises ValueError
        log.warning("vectorization failed, the kernels run as scalar loops: %s", str(exc)[:2000])
        _restore(module, backup)
    else:
        backup.erase()
    for op in walk_ops(module, _GENERIC):
        if TAG in op.attributes:
            del op.attributes[TAG]


def _restore(module: ir.Module, backup: ir.Operation) -> None:
    for op in list(module.body.operations):
        op.operation.erase()
    for op in list(backup.regions[0].blocks[0].operations):
        module.body.append(op.operation)
    backup.erase()
