"""Derive an op's rule from its linalg structure: indexing maps, iterator types, body.

Works for `linalg.generic` and every named linalg op (matmul, batch_matmul,
transpose, fill, elementwise ...) without per-op code. The op's facts are read
as every stage reads them (`slicer.core.linalg_facts`):
- indexing maps come from the LinalgOp interface (`linalg.get_indexing_maps`);
- iterator types and the body of a named op come from a generalized copy
  (upstream `linalg-generalize-named-ops` on a throwaway function holding a clone
  of the op), so the table stays exactly what MLIR itself says the op means.
For each operand (inputs then outputs) and result dim: a plain `d_i` walks loop
`i`; any other affine expression (`d0 + d1`, a constant, a symbol, `d0 * 2`)
blocks tiling that dim and the loops it mentions. Each result's reduction
combiner is checked (`combiner.py`), and parallel loops the body reads with `linalg.index`
are blocked (a block would see indices shifted by its offset); a reduction loop read so may be split, each
block reading its index plus its start (`OpRule.index_shifts`: the one-hot pick of a cross-entropy's target).
Tables the body reads with `tensor.extract` are operands too (`gathers.py`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func, linalg

from slicer.core.linalg_facts import (
    PARALLEL,
    REDUCTION,
    indexing_maps,
    iterator_kinds,
    loop_dim,
    loop_sizes,
    mentioned_dims,
)
from slicer.core.names import DIM_ATTR
from slicer.core.operations import walk_ops
from slicer.core.pipeline import run_pipeline

from .combiner import reduction_combiner
from .gathers import table_uses
from .table import DimUse, OpRule


def linalg_rule(op: ir.Operation) -> OpRule:
    """The rule of a linalg op (see the module docstring); the op itself is not modified."""
    maps = indexing_maps(op)
    if op.name == linalg.GenericOp.OPERATION_NAME:
        return _rule_of_generic(op.name, op, maps)
    with op.context, op.location:
        probe = _generalized_clone(op)
        generic = next(walk_ops(probe, linalg.GenericOp.OPERATION_NAME), None)
        if generic is None:
            return _rule_of_folded(op, maps)
        return _rule_of_generic(op.name, generic, maps)


def _rule_of_folded(op: ir.Operation, maps: list[ir.AffineMap]) -> OpRule:
    """The rule of a named op that generalization folded away (an identity: a transpose by the identity
    permutation, a copy): every loop its result walks is parallel and the body copies its input."""
    num_results = len(op.results)
    operands = tuple(tuple(_dim_use(expr) for expr in m.results) for m in maps)
    walked = {use.loop for uses in operands[len(operands) - num_results:] for use in uses if use.loop is not None}
    loops = maps[0].n_dims if maps else 0
    iterators = tuple(PARALLEL if d in walked else REDUCTION for d in range(loops))
    reason = "body is unknown (generalization folded the op away), so it is not known to be an addition"
    combiners = (None if len(walked) == loops else reason,) * num_results
    return OpRule(op.name, iterators, operands, operands[len(operands) - num_results:], combiners)


def _rule_of_generic(name: str, generic: ir.Operation, maps: list[ir.AffineMap]) -> OpRule:
    iterators = tuple(iterator_kinds(generic))
    num_results = len(generic.results)
    num_inputs = len(generic.operands) - num_results  # the rule's results are the op's (a buffer-form op has none)
    operands = tuple(tuple(_dim_use(expr) for expr in m.results) for m in maps)
    results = operands[num_inputs:]
    body = generic.regions[0].blocks[0]
    reduces = REDUCTION in iterators
    combiners = tuple(reduction_combiner(body, r, num_inputs) if reduces else None for r in range(num_results))
    names = tuple(
        f"operand #{k} ({'input' if k < num_inputs else 'init'} {k if k < num_inputs else k - num_inputs})"
        for k in range(len(operands))
    )
    sizes = loop_sizes(generic, maps)
    tables = table_uses(generic, sizes)
    names += tuple(f"operand #{len(operands) + t} (a table the body reads with tensor.extract)"
                   for t in range(len(tables.tables)))
    blocks, shifts = [], []
    for d, why in _index_blocks(body):
        if d in tables.freed_loops:
            continue
        if iterators[d] == REDUCTION and sizes[d] is not None:
            shifts.append((d, sizes[d]))  # a block reads its global index: linalg.index + its start
        else:
            blocks.append((d, why))
    return OpRule(name, iterators, operands + tables.uses, results, combiners, tuple(blocks), names,
                  tables.gathers, tuple(shifts), len(tables.tables))


def _dim_use(expr: ir.AffineExpr) -> DimUse:
    dim = loop_dim(expr)
    if dim is not None:
        return DimUse.walks(dim)
    if isinstance(expr, ir.AffineConstantExpr):
        return DimUse.blocked(f"is indexed by the constant {expr.value}, not a loop dim")
    return DimUse.blocked(f"is indexed by {expr}, not a plain loop dim", tuple(sorted(mentioned_dims(expr))))


def _index_blocks(body: ir.Block) -> tuple[tuple[int, str], ...]:
    found: dict = {}
    for top in body.operations:
        for op in walk_ops(top, linalg.IndexOp.OPERATION_NAME):
            dim = ir.IntegerAttr(op.attributes[DIM_ATTR]).value
            found.setdefault(dim, f"the body reads linalg.index {dim} (the iteration index), which inside a "
                                  "block would count from the block's start")
    return tuple(sorted(found.items()))


GENERALIZE_PIPELINE = "func.func(linalg-generalize-named-ops)"
"""Rewrites a named linalg op as the `linalg.generic` its rule is read from."""


def _generalized_clone(op: ir.Operation) -> ir.Module:
    """A module with one function applying a clone of `op` to its arguments, generalized."""
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp("rule_probe", ([v.type for v in op.operands], [r.type for r in op.results]))
        block = fn.add_entry_block()
        with ir.InsertionPoint(block):
            clone = op.clone()
            for index, arg in enumerate(block.arguments):
                clone.operands[index] = arg
            func.ReturnOp(list(clone.results))
    run_pipeline(module, GENERALIZE_PIPELINE)
    return module


