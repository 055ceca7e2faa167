"""The program read once into plain data for the search: every value's shape and element size, every top-level
op of the entry function as the loops its operands and results walk (from the rule table, `slicer.rules`), its
work (FLOPs, bytes) and whether it is a contraction.

The search evaluates thousands of tilings; reading the IR and deriving rules once makes each evaluation a walk
over Python tuples (`cost_model.evaluate`), with no MLIR and no rewriting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import arith, linalg, tensor
from mlir.dialects import func as func_d

from slicer.core import dtypes
from slicer.core.errors import CompileError, NoRule
from slicer.core.functions import EntryError, entry_function, function_name, function_type, value_names
from slicer.core.linalg_facts import REDUCTION, VIEW_OPS, is_linalg_op, reshape_kept_dims
from slicer.dialect import make_context, parse_source
from slicer.rules import rule_for, rule_operands

#: Ops the kernel graph recomputes in each kernel that needs them (never passed between kernels).
_CHEAP = (tensor.EmptyOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME)
#: Ops that only give a tensor a new shape or type: no work, and their result is the same bytes as their operand.
_VIEWS = (*VIEW_OPS, *_CHEAP)
#: Ops a compiled kernel runs without moving data: views (reshapes, casts) and slices read in place (bufferized to
#: subviews of their source). The pricing charges them nothing (`cost_model`, `graph_cost`).
FREE_OPS = frozenset({*VIEW_OPS, tensor.ExtractSliceOp.OPERATION_NAME})
#: An insert_slice writes its source into its destination's buffer in place: it moves its source's bytes, however
#: large the destination (a gradient bucket packing its members).
INSERT_SLICE = tensor.InsertSliceOp.OPERATION_NAME


@dataclass(frozen=True)
class OpSketch:
    """One op as the cost model sees it. `operand_loops[k][d]` is the loop dim `d` of operand `k` walks (None:
    it walks none, so tiling it forces a gather); `gathers` the (operand, dim) pairs of tables whose tiled dim
    gives partial sums; `summable`: its reductions add (a tiled reduction loop leaves partial sums, else the
    operand is gathered); `ruled`: False for an op without a rule (every operand is used whole)."""

    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    operand_loops: tuple[tuple[int | None, ...], ...]
    result_loops: tuple[tuple[int | None, ...], ...]
    loop_sizes: tuple[int, ...]
    reductions: frozenset[int]
    gathers: frozenset[tuple[int, int]]
    summable: bool
    flops: float
    contraction: bool
    ruled: bool = True
    line: str = ""
    cheap: bool = False  # a constant, empty tensor or fill of one: recomputed in each kernel, never stored
    fill: bool = False  # a generic op writing a constant into an empty tensor: no data in, so the partitioner
    #                     makes each device's block where its consumer needs it (made in each kernel reading it)
    # Per loop, the sizes a tiling of it must divide (their gcd; 0: none): the dims it walks that propagation cuts
    # only evenly (`propagation.blockwise._indivisible`: any dim of an op that is neither a linalg op nor a reshape
    # leaving that dim alone, such as the heads dim a reshape makes). A tiling that does not divide one stops there.
    even_sizes: tuple[int, ...] = ()


@dataclass(frozen=True)
class Sketch:
    """The entry function as data: value shapes and element sizes (arguments first), its ops in order, its
    results, and the names of its arguments and results."""

    entry: str
    shapes: tuple[tuple[int, ...], ...]
    itemsizes: tuple[int, ...]
    num_args: int
    ops: tuple[OpSketch, ...]
    results: tuple[int, ...]
    arg_names: tuple[str, ...]
    result_names: tuple[str, ...]

    def nbytes(self, value: int) -> int:
        return math.prod(self.shapes[value]) * self.itemsizes[value]


def read_sketch(text: str, entry: str | None = None, arg_names=(), result_names=()) -> Sketch:
    """The sketch of `entry` in `text` (MLIR); CompileError if it does not parse or has dynamic shapes."""
    with make_context():
        try:
            module = parse_source(text, "<program>")  # held: the function's ops live as long as the module
            func = entry_function(module, entry)
        except (ir.MLIRError, EntryError) as exc:
            raise CompileError(f"slicer.auto: cannot read the program: {exc}") from None
        reader = _Reader()
        for arg in func.regions[0].blocks[0].arguments:
            reader.value(arg)
        results: tuple[int, ...] = ()
        for op in func.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == func_d.ReturnOp.OPERATION_NAME:
                results = tuple(reader.ids.get(_key(v), -1) for v in op.operands)
                continue
            reader.op(op)
        names = tuple(arg_names) or tuple(n or f"arg{i}" for i, n in enumerate(value_names(func)))
        rnames = tuple(result_names) or tuple(n or "" for n in value_names(func, "result"))
        count = len(function_type(func).inputs)
        return Sketch(function_name(func), tuple(reader.shapes), tuple(reader.itemsizes), count, tuple(reader.ops),
                      results, names, rnames)


def read_kernels(text: str) -> dict[str, Sketch]:
    """Every function of `text` (a kernel graph's `kernels_mlir`) as a sketch, by function name: what the
    compiled program's kernels compute, priced like the program's ops (`graph_cost.py`)."""
    found = {}
    with make_context():
        try:
            module = parse_source(text, "<kernels>")
        except ir.MLIRError as exc:
            raise CompileError(f"slicer.auto: cannot read the compiled kernels: {exc}") from None
        for func in module.regions[0].blocks[0].operations:
            if func.operation.name != func_d.FuncOp.OPERATION_NAME:
                continue
            reader = _Reader()
            for arg in func.regions[0].blocks[0].arguments:
                reader.value(arg)
            count = len(reader.shapes)
            for op in func.regions[0].blocks[0].operations:
                if op.operation.name != func_d.ReturnOp.OPERATION_NAME:
                    reader.op(op.operation)
            name = function_name(func)
            found[name] = Sketch(name, tuple(reader.shapes), tuple(reader.itemsizes), count, tuple(reader.ops), (),
                                 (), ())
    return found


def _key(value: ir.Value):
    return value


class _Reader:
    """Numbers tensor values and turns ops into `OpSketch`es."""

    def __init__(self):
        self.ids: dict = {}
        self.shapes: list[tuple[int, ...]] = []
        self.itemsizes: list[int] = []
        self.ops: list[OpSketch] = []
        self.cheap: set[int] = set()  # values of cheap ops (empty tensors, constants, fills of them)

    def value(self, value: ir.Value) -> int:
        if not isinstance(value.type, ir.RankedTensorType):
            return -1
        found = self.ids.get(value)
        if found is not None:
            return found
        type_ = ir.RankedTensorType(value.type)
        if not type_.has_static_shape:
            raise CompileError(f"slicer.auto: a value of type {type_} has a dynamic shape: the search prices "
                               "blocks of known sizes; give the program static shapes")
        size = dtypes.byte_size(str(type_.element_type)) or (getattr(type_.element_type, "width", 32) + 7) // 8
        self.ids[value] = len(self.shapes)
        self.shapes.append(tuple(type_.shape))
        self.itemsizes.append(size)
        return self.ids[value]

    def op(self, op: ir.Operation) -> None:
        results = tuple(self.value(r) for r in op.results)
        if all(r < 0 for r in results):
            return
        try:
            rule = rule_for(op)
            values = rule_operands(op)
        except NoRule:
            rule, values = None, list(op.operands)
        operands = tuple(self.value(v) for v in values)
        line = str(op.location)
        cheap = op.name in _CHEAP or (op.name == linalg.FillOp.OPERATION_NAME and operands[:1] == (-1,))
        if cheap:
            self.cheap.update(r for r in results if r >= 0)
        if rule is None:
            self.ops.append(OpSketch(op.name, operands, results, tuple(() for _ in operands),
                                     tuple(() for _ in results), (), frozenset(), frozenset(), False, 0.0, False,
                                     ruled=False, line=line))
            return
        loops = len(rule.iterator_types)
        sizes = [1] * loops
        for k, uses in enumerate(rule.operands + rule.results):
            v = (operands + results)[k] if k < len(operands + results) else -1
            for d, use in enumerate(uses):
                if v >= 0 and use.loop is not None and d < len(self.shapes[v]):
                    sizes[use.loop] = max(sizes[use.loop], self.shapes[v][d])
        blocked = {b for b, _ in rule.loop_blocks}
        walk = lambda uses: tuple(u.loop if u.loop is not None and u.loop not in blocked else None  # noqa: E731
                                  for u in uses)
        reductions = frozenset(i for i, kind in enumerate(rule.iterator_types) if kind == REDUCTION)
        flops, contraction = _work(op, sizes, reductions)
        fill = not cheap and _is_fill(op) and all(v < 0 or v in self.cheap for v in operands)
        self.ops.append(OpSketch(op.name, operands, results, tuple(walk(u) for u in rule.operands),
                                 tuple(walk(u) for u in rule.results), tuple(sizes), reductions,
                                 frozenset(rule.gathers), all(c is None for c in rule.combiners), flops,
                                 contraction, line=line, cheap=cheap, fill=fill,
                                 even_sizes=self.even_sizes(op, rule, operands, results, loops)))

    def even_sizes(self, op: ir.Operation, rule, operands, results, loops: int) -> tuple[int, ...]:
        """`OpSketch.even_sizes` of `op`: per loop, the gcd of the sizes of the dims walking it that propagation
        cuts only evenly (none in a linalg op; a reshape's dims but those it leaves alone)."""
        if is_linalg_op(op):
            return ()
        kept = reshape_kept_dims(op)
        even = [0] * loops
        for k, uses in enumerate(rule.operands + rule.results):
            v = (operands + results)[k] if k < len(operands + results) else -1
            operand = k < len(rule.operands)
            for d, use in enumerate(uses):
                if v < 0 or use.loop is None or d >= len(self.shapes[v]):
                    continue
                if kept is not None and d in (kept if operand else kept.values()):
                    continue
                even[use.loop] = math.gcd(even[use.loop], self.shapes[v][d])
        return tuple(even) if any(even) else ()


def _is_fill(op: ir.Operation) -> bool:
    """A `linalg.generic` that yields a value from outside its body (a constant) at every point: it reads no
    element of its operands (the importer's zero init of a matmul's accumulator)."""
    if op.name != linalg.GenericOp.OPERATION_NAME or not op.regions or not op.regions[0].blocks:
        return False
    body = op.regions[0].blocks[0]
    inner = [o.operation for o in body.operations]
    if any(o.name not in (linalg.YieldOp.OPERATION_NAME, arith.ConstantOp.OPERATION_NAME) for o in inner):
        return False
    return not any(isinstance(v.owner, ir.Block) for v in inner[-1].operands)


def _work(op: ir.Operation, sizes: list[int], reductions: frozenset[int]) -> tuple[float, bool]:
    """(FLOPs, is a contraction) of one op: its body's arithmetic ops once per point of its loop nest; for a
    contraction, a multiply and an add per point, and the rest of its body (elementwise ops fused into an
    operand, a gelu before a matmul) once per element of its largest input, as packing applies them."""
    if op.name in _VIEWS or not sizes:
        return 0.0, False
    body_ops, multiplies = 1, False
    if is_linalg_op(op) and op.regions and op.regions[0].blocks:
        names = [o.operation.name for o in op.regions[0].blocks[0].operations]
        body_ops = max(1, sum(1 for n in names if n != linalg.YieldOp.OPERATION_NAME))
        multiplies = any(n in (arith.MulFOp.OPERATION_NAME, arith.MulIOp.OPERATION_NAME) for n in names)
    ins = list(op.operands)[:max(0, len(op.operands) - len(op.results))]
    inputs = [v for v in ins if isinstance(v.type, ir.RankedTensorType)]
    if reductions and multiplies and len(inputs) >= 2:
        largest = max(math.prod(ir.RankedTensorType(v.type).shape) for v in inputs)
        return float(2 * math.prod(sizes) + max(0, body_ops - 2) * largest), True
    return float(math.prod(sizes) * body_ops), False
