"""Applying tactics: turn them into an equal program with `slicer.loop`/`slicer.slice`
(`slicer-apply-tactics` and `slicer.apply_tactics` both call `TacticRewriter`).

Tiling %v along dim d over axes A (major to minor) is `%v2 = slicer.loop tile<d> over range<A, |A|> { yield
slicer.slice(%v, d, r) }`, the other uses of %v redirected to %v2: the loop rebuilds %v from its blocks, so the
program means the same, and propagation later pushes it into %v's consumers. `Replicate` records the requirement
as a `slicer.annotate` with an all-empty sharding. Where the loops go and why one loop over a product range:
docs/tactics.md. Requests are collected (`requests.py`) and checked (`request_checks.py`) first.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import func as func_d

from slicer.core.errors import TacticError
from slicer.core.functions import defined_functions, function_name, function_type
from slicer.core.mesh import Mesh
from slicer.core.names import ARG_ATTRS_ATTR, PRIORITY_ATTR, RES_ATTRS_ATTR, SHARDING_ATTR, TACTIC_ATTR
from slicer.dialect import AnnotateOp, RangeType, Sharding, TileAction, annotate, loop, slice_, yield_
from slicer.dialect import mesh as build_mesh

from .request_checks import check_requests
from .requests import NEW_MESH_NAME, RequestCollector, TacticRequest
from .values import Tactic


class TacticRewriter:
    """Collects, checks and applies the IR annotations and a schedule on one module."""

    def __init__(self, module: ir.Operation, tactics: tuple[Tactic, ...] = (), *, mesh=None, entry: str | None = None,
                 after_each: Callable[[str], None] | None = None):
        """`mesh`: None, a declared mesh's name, or a `Mesh` / `{axis: size}` mapping; `after_each(label)` runs
        after each tactic is applied (check-each-step)."""
        self.module = module
        self.after_each = after_each
        self.tactics = tactics
        self.mesh = mesh
        self.entry = entry.lstrip("@") if isinstance(entry, str) and entry else None

    def run(self) -> None:
        with self.module.context:
            collector = RequestCollector(self.module, self.tactics, mesh=self.mesh, entry=self.entry)
            requests = collector.collect()
            errors = collector.errors + check_requests(requests, collector.meshes)
            if errors:
                raise TacticError(errors)
            if collector.new_mesh is not None:
                block = self.module.regions[0].blocks[0]
                build_mesh(NEW_MESH_NAME, collector.new_mesh, loc=self.module.location,
                           ip=ir.InsertionPoint.at_block_begin(block))
            after_each = (lambda request: self.after_each(request.label)) if self.after_each else None
            _Rewrite(collector.meshes).apply(requests, after_each)
            for func in defined_functions(self.module):
                _drop_sharding_attrs(func)


class _Rewrite:
    """Applies checked requests in order (see the module docstring for the shapes produced)."""

    def __init__(self, meshes: dict[str, Mesh]):
        self.meshes = meshes
        self.current: dict[tuple, ir.Value] = {}  # the value consumers see now, per arg/annotate target
        self.anchor: dict[tuple, ir.Operation] = {}  # insert after this op (per function top / annotate)
        self.consumed: list[ir.Operation] = []
        self.replicated: set[tuple] = set()
        self.order = 0  # position of the request being applied in the schedule
        self.result_labels: dict[str, tuple[ir.Operation, dict[int, list[str]]]] = {}  # function name -> labels

    def apply(self, requests: list[TacticRequest], after_each=None) -> None:
        """Apply `requests` in order; `after_each(request)` runs after each one (check-each-step)."""
        for order, request in enumerate(requests):
            self.order = order
            if request.tile is None:
                if request.key in self.replicated:
                    continue  # replicating twice is replicating once
                self.replicated.add(request.key)
            loc = ir.Location.name(request.label, childLoc=request.location, context=request.location.context)
            with loc:
                if request.kind == "result":
                    self.rewrite_result(request, loc)
                else:
                    self.rewrite_value(request, loc)
            if after_each is not None:
                self.label_results()
                after_each(request)
        self.label_results()
        for op in self.consumed:
            view = AnnotateOp(op)
            view.result.replace_all_uses_with(view.source)
            op.erase()

    def label_results(self) -> None:
        """Write the labels of the results rewritten so far (`_label_results`)."""
        for func, labels in self.result_labels.values():
            _label_results(func, labels)
        self.result_labels = {}

    def rewrite_value(self, request: TacticRequest, loc: ir.Location) -> None:
        """Wrap a function argument (at the function top) or an annotated value (after the annotation)."""
        key = request.key
        if request.kind == "arg":
            block = request.func.regions[0].blocks[0]
            value = self.current.setdefault(key, block.arguments[request.index])
            anchor_key = ("top", function_name(request.func))
            anchor = self.anchor.get(anchor_key)
            ip = ir.InsertionPoint.after(anchor) if anchor is not None else ir.InsertionPoint.at_block_begin(block)
        else:
            op = request.annotate_op
            if request.tile is None:
                return  # already recorded by this very all-empty annotation
            if not self.consumed or self.consumed[-1] != op:
                self.consumed.append(op)
            value = self.current.setdefault(key, op.results[0])
            anchor_key = key
            ip = ir.InsertionPoint.after(self.anchor.get(anchor_key, op))
        if request.tile is None:
            new, built, user = self.replicate(request, value, loc, ip)
        else:
            new, built, user = self.tile(request, value, loc, ip)
        value.replace_all_uses_except(new, user)
        self.current[key] = new
        self.anchor[anchor_key] = built

    def rewrite_result(self, request: TacticRequest, loc: ir.Location) -> None:
        """Wrap operand `index` of every `func.return` just before it."""
        for block in request.func.regions[0].blocks:
            term = block.operations[len(block.operations) - 1].operation
            if term.name != func_d.ReturnOp.OPERATION_NAME:
                continue
            value = term.operands[request.index]
            if request.tile is None:
                new, _, _ = self.replicate(request, value, loc, ir.InsertionPoint(term))
            else:
                new, _, _ = self.tile(request, value, loc, ir.InsertionPoint(term))
            term.operands[request.index] = new
        name = function_name(request.func)
        self.result_labels.setdefault(name, (request.func, {}))[1].setdefault(request.index, []).append(request.label)

    def tile(self, request: TacticRequest, value: ir.Value, loc, ip) -> tuple[ir.Value, ir.Operation, ir.Operation]:
        """`loop tile<d> over range<axes> { yield slice(value, d, r) }` -> (result, loop op, slice op)."""
        dim, axes = request.tile
        mesh = self.meshes[request.mesh]
        rng = RangeType(tuple(axes), mesh.group_size(axes))
        built = loop([value.type], mesh=request.mesh, action=TileAction(dim), range=rng, loc=loc, ip=ip)
        # Provenance for propagation: which tactic, and its place in the schedule (earlier wins).
        built.operation.attributes[TACTIC_ATTR] = ir.StringAttr.get(request.label)
        built.operation.attributes[PRIORITY_ATTR] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), self.order)
        with ir.InsertionPoint(built.body):
            block = slice_(value, built.range_arg, dim, loc=loc)
            yield_([block], loc=loc)
        return built.results[0], built.operation, block.owner.operation

    def replicate(self, request: TacticRequest, value: ir.Value, loc,
                  ip) -> tuple[ir.Value, ir.Operation, ir.Operation]:
        """`slicer.annotate` of `value` with an all-empty sharding -> (result, op, op)."""
        rank = ir.RankedTensorType(value.type).rank
        result = annotate(value, Sharding(request.mesh, ((),) * rank), loc=loc, ip=ip)
        return result, result.owner.operation, result.owner.operation


def _label_results(func: ir.Operation, labels: dict[int, list[str]]) -> None:
    """Record on each result (its `slicer.tactic`) the tactics that set its layout, so the partitioned function
    says the result was asked for, not left to the default (labels of several tactics are joined, after any the
    result had). All at once: the result attributes are one array, rebuilt whole for any change."""
    count = len(function_type(func).results)
    dicts = ([{a.name: a.attr for a in ir.DictAttr(d)} for d in ir.ArrayAttr(func.attributes[RES_ATTRS_ATTR])]
             if RES_ATTRS_ATTR in func.attributes else [{} for _ in range(count)])
    for index, texts in labels.items():
        before = dicts[index].get(TACTIC_ATTR)
        text = "; ".join(([ir.StringAttr(before).value] if before is not None else []) + texts)
        dicts[index][TACTIC_ATTR] = ir.StringAttr.get(text)
    func.attributes[RES_ATTRS_ATTR] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])


def _drop_sharding_attrs(func: ir.Operation) -> None:
    """Remove `slicer.sharding` from argument/result attributes (they are now loops/annotations)."""
    for key in (ARG_ATTRS_ATTR, RES_ATTRS_ATTR):
        if key not in func.attributes:
            continue
        dicts = []
        for attrs in ir.ArrayAttr(func.attributes[key]):
            attrs = ir.DictAttr(attrs)
            dicts.append({a.name: a.attr for a in attrs if a.name != SHARDING_ATTR})
        if any(dicts):
            func.attributes[key] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])
        else:
            del func.attributes[key]
