"""Experts of an `nn.ModuleList` imported as stacked weights (issue 51): `training_step(..., stacked=pattern)`.

Expert parallel tiles stacked expert weights [E, ...] on E; a mixture of experts written with one module per
expert (`self.experts = nn.ModuleList(...)`, `torch.stack([e(d[i]) for i, e in enumerate(self.experts)])`)
has E weights of one expert each instead. For each ModuleList whose path matches `stacked`, the step takes one
argument per weight of an expert, `<path>.<weight>` (`blocks.0.moe.experts.w1.weight`), the members' values
stacked on a new dim 0 (`torch.stack([experts[i].w1.weight ...])`), with its own optimizer state; the members
the model sees are its slices. The loop over the experts becomes one batched computation: while the step is
traced, the first expert called on slice i of a tensor whose dim 0 has E entries computes every expert on
that tensor at once (`torch.func.vmap` of the expert over the stacked weights and the tensor) and each expert
returns its row of the result; `torch.stack` of the rows in order, and the sum of their gradients'
`select_backward`s, are then the batched value itself (`fold_stacks`). An expert called on anything else
computes alone on its slices of the weights (correct, but not batched). The step is the same function of the
stacked weights: its gradient of `<path>.<weight>` is the members' gradients stacked.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from slicer.core.errors import FrontendError
from slicer.tactics.patterns import closest_hint, matching


@dataclass(frozen=True)
class ExpertStack:
    """A ModuleList of E experts of one kind at `path`, imported as one stacked weight per weight of an expert."""

    path: str
    size: int
    weights: tuple[str, ...]  # an expert's parameter names (`w1.weight`)

    def name(self, weight: str) -> str:
        return f"{self.path}.{weight}"

    def members(self, weight: str) -> list[str]:
        return [f"{self.path}.{i}.{weight}" for i in range(self.size)]


def find_stacks(torch, model, pattern: str | None) -> list[ExpertStack]:
    """The ModuleLists of `model` whose paths match `pattern` ('*' crosses dots), each of E >= 1 modules of one
    type with the same parameters (names, shapes, dtypes, requires_grad) and no buffers; FrontendError for a
    pattern naming no ModuleList, or a ModuleList whose experts differ."""
    if pattern is None:
        return []
    if not isinstance(pattern, str) or not pattern:
        raise FrontendError(f"training_step: stacked={pattern!r} must be a pattern naming nn.ModuleLists of "
                            "experts, e.g. stacked='blocks.*.moe.experts'")
    lists = {p: m for p, m in model.named_modules() if isinstance(m, torch.nn.ModuleList) and len(m)}
    paths = [list(lists)[i] for i in matching(pattern, list(lists))]
    if not paths:
        raise FrontendError(f"training_step: stacked={pattern!r} matches no nn.ModuleList of the model"
                            f"{closest_hint(pattern, list(lists))}; ModuleLists: {', '.join(lists) or 'none'}")
    return [_stack(path, lists[path]) for path in paths]


def _stack(path: str, experts) -> ExpertStack:
    """The ExpertStack of the ModuleList `experts` at `path`; FrontendError if its modules differ."""
    def signature(module):
        return (type(module), [(n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in module.named_parameters()],
                [n for n, _ in module.named_buffers()])
    first = signature(experts[0])
    for i, module in enumerate(experts):
        if signature(module) != first:
            raise FrontendError(f"training_step: the experts of {path} differ ({path}.{i} is not {path}.0's type "
                                "with its parameters' names, shapes and dtypes); stacked= takes ModuleLists of "
                                "experts of one kind")
    if first[2] or not first[1]:
        raise FrontendError(f"training_step: the experts of {path} have buffers or no parameters; stacked= takes "
                            "experts whose state is their parameters")
    return ExpertStack(path, len(experts), tuple(n for n, *_ in first[1]))


def stacked_parameters(torch, params: dict, stacks: list[ExpertStack]) -> dict:
    """`params` (name -> parameter) with each stack's members replaced, where the first of them was, by the
    stacked weights `<path>.<weight>` (leaf tensors requiring grad as the members do)."""
    firsts = {s.members(w)[0]: (s, w) for s in stacks for w in s.weights}
    gone = {m for s in stacks for w in s.weights for m in s.members(w)}
    result = {}
    for name, param in params.items():
        if name in firsts:
            stack, weight = firsts[name]
            value = torch.stack([params[m].detach() for m in stack.members(weight)])
            result[stack.name(weight)] = value.requires_grad_(param.requires_grad)
        elif name not in gone:
            result[name] = param
    return result


def member_values(values: dict, stacks: list[ExpertStack]) -> dict:
    """`values` (name -> tensor, some of them stacked weights) with each stacked weight replaced by its members'
    slices (`stacked[i]`), the names the model's modules have."""
    result = dict(values)
    for stack in stacks:
        for weight in stack.weights:
            stacked = result.pop(stack.name(weight))
            result.update({m: stacked[i] for i, m in enumerate(stack.members(weight))})
    return result


@contextlib.contextmanager
def batched_experts(torch, model, stacks: list[ExpertStack], weights: dict):
    """While active, the experts of each stack compute together (module docstring); `weights` (stacked name ->
    tensor) is read at each call, so the caller may fill it after entering."""
    kept = []
    rows: dict = {}
    for stack in stacks:
        experts = model.get_submodule(stack.path)
        state: dict = {"inside": False, "cache": None, "rows": rows}
        for index, module in enumerate(experts):
            kept.append((module, module.__dict__.get("forward")))
            module.forward = _batched_forward(torch, stack, experts, index, weights, state)
    try:
        with (_rows_recorded(torch, rows) if stacks else contextlib.nullcontext()):
            yield
    finally:
        for module, before in kept:
            del module.forward
            if before is not None:
                module.forward = before


def _batched_forward(torch, stack: ExpertStack, experts, index: int, weights: dict, state: dict):
    """The forward of expert `index` of `stack` (module docstring); `state` is shared by the stack's experts."""
    original = type(experts[index]).forward.__get__(experts[index])

    def forward(*args, **kwargs):
        row = state["rows"].get(id(args[0])) if len(args) == 1 and not kwargs else None
        if state["inside"] or row is None or row[0] is not args[0] or row[2] != index or row[1].shape[0] != stack.size:
            return original(*args, **kwargs)
        base = row[1]
        cached = state["cache"]
        if cached is None or cached[0] is not base:
            first = experts[0]

            def one(expert_weights, x):
                return torch.func.functional_call(first, dict(zip(stack.weights, expert_weights)), (x,))

            state["inside"] = True
            try:
                stacked = tuple(weights[stack.name(w)] for w in stack.weights)
                cached = state["cache"] = (base, torch.func.vmap(one)(stacked, base))
            finally:
                state["inside"] = False
        return cached[1][index]

    return forward


def _rows_recorded(torch, rows: dict):
    """A torch function mode recording in `rows` each row taken of a tensor on its dim 0 (`t[i]`,
    `t.select(0, i)`, the rows of `t.unbind(0)` or of iterating `t`): id(row) -> (row, t, i)."""
    from torch.overrides import TorchFunctionMode  # optional dependency, like torch itself

    class RowsRecorded(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            result = func(*args, **kwargs)
            name = getattr(func, "__name__", "")
            dim = kwargs.get("dim", args[1] if name == "select" and len(args) > 1 else 0)
            if name == "__getitem__" and len(args) == 2 and type(args[1]) is int and dim == 0:
                rows[id(result)] = (result, args[0], args[1] % args[0].shape[0])
            elif name == "select" and dim == 0 and type(index := kwargs.get("index", args[-1])) is int:
                rows[id(result)] = (result, args[0], index % args[0].shape[0])
            elif name == "unbind" and dim in (0, None) and isinstance(result, tuple):
                rows.update({id(r): (r, args[0], i) for i, r in enumerate(result)})
            return result

    return RowsRecorded()


def fold_stacks(torch, graph):
    """`graph` (the traced step, an fx GraphModule) with the rows of the batched experts' results put back
    together replaced by the results: `cat` (or `stack`) on dim 0 of `select(y, 0, i)` for every i in order is
    `y` (reshaped as the cat is), and a sum of the rows' gradients each written into zeros at its row
    (autograd's `select_backward`: `where(arange(E) == i, g[i], 0)`) for every i is `g`."""
    aten = torch.ops.aten
    for node in list(graph.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in (aten.cat.default, aten.stack.default) and _dim(node, 1) == 0:
            whole = _whole([_row(aten, n) for n in node.args[0]])
            if whole is not None:
                _replace(aten, graph, node, whole, stacked=node.target is aten.stack.default)
        elif node.target is aten.add.Tensor:
            rows = [_scattered_row(aten, n) for n in _terms(aten, node)]
            # the rows are disjoint (each term is zero outside its row): any order sums them exactly
            whole = None if None in rows else _whole(sorted(rows, key=lambda row: row[1]))
            if whole is not None and _shape(whole) == _shape(node):
                node.replace_all_uses_with(whole)
    graph.graph.eliminate_dead_code()
    graph.recompile()
    return graph


def _dim(node, position: int) -> int:
    return node.args[position] if len(node.args) > position else node.kwargs.get("dim", 0)


def _shape(node) -> tuple | None:
    value = node.meta.get("val") if hasattr(node, "meta") else None
    return tuple(value.shape) if value is not None else None


def _row(aten, node):
    """(y, i) when `node` is `select(y, 0, i)`, else None."""
    if getattr(node, "target", None) is aten.select.int and node.args[1] == 0:
        return node.args[0], node.args[2]
    return None


def _whole(rows: list):
    """y when `rows` are (y, 0), (y, 1), ..., (y, E - 1) and y's dim 0 has E entries, else None."""
    if not rows or any(r is None for r in rows) or len({id(r[0]) for r in rows}) != 1:
        return None
    whole = rows[0][0]
    shape = _shape(whole)
    return whole if shape and shape[0] == len(rows) and [r[1] for r in rows] == list(range(len(rows))) else None


def _terms(aten, node) -> list:
    """The terms of the sum `node` (add nodes without alpha, through adds used only there)."""
    terms = []
    for arg in node.args[:2]:
        inner = getattr(arg, "target", None) is aten.add.Tensor and not arg.kwargs and len(arg.users) == 1
        terms += _terms(aten, arg) if inner else [arg]
    return terms if not node.kwargs else [node]


def _scattered_row(aten, node):
    """(g, i) when `node` is `where(arange(0, E).view(-1, 1, ...) == i, g[i].unsqueeze(0).expand(...), 0)`
    (torch's select_backward of `g[i]`), else None."""
    if getattr(node, "target", None) is not aten.where.self:
        return None
    mask, value, zero = node.args
    if (getattr(zero, "target", None) is not aten.full_like.default or zero.args[1] != 0
            or getattr(mask, "target", None) is not aten.eq.Scalar
            or getattr(value, "target", None) is not aten.expand.default):
        return None
    iota = mask.args[0].args[0] if getattr(mask.args[0], "target", None) is aten.view.default else None
    unsqueezed = value.args[0]
    if (getattr(iota, "target", None) is not aten.arange.start_step or iota.args[0] != 0
            or getattr(unsqueezed, "target", None) is not aten.unsqueeze.default or unsqueezed.args[1] != 0):
        return None
    row = _row(aten, unsqueezed.args[0])
    return row if row is not None and row[1] == mask.args[1] else None


def _replace(aten, graph, node, whole, *, stacked: bool) -> None:
    """Uses of `node` (the rows of `whole` concatenated, or stacked) made uses of `whole`: directly where the
    shapes agree, else through a view to `node`'s shape."""
    if stacked or _shape(node) == _shape(whole):
        node.replace_all_uses_with(whole)
        return
    for user in list(node.users):
        if user.target is aten.view.default and _shape(user) == _shape(whole):
            user.replace_all_uses_with(whole)
    if node.users:
        with graph.graph.inserting_after(node):
            view = graph.graph.call_function(aten.view.default, (whole, list(_shape(node) or ())))
        view.meta = dict(node.meta)
        node.replace_all_uses_with(view)


__all__ = ["ExpertStack", "batched_experts", "find_stacks", "fold_stacks", "member_values", "stacked_parameters"]

