"""A training step's forward cut into pipeline stages at module boundaries (`slicer.strategies.pipeline`).

The model's forward and the loss, on one micro-batch, are traced into one aten graph (make_fx) while forward
pre-hooks on the modules that begin a stage (`split=["blocks.4", ...]`, torch's split points) record, in every
node's metadata, the stage that was running when torch created it (`torch.fx.traceback`'s "custom" metadata,
which make_fx copies into each node). Every node thus belongs to the stage whose modules computed it; values
computed before the first split point (the embeddings) belong to stage 0 and the loss to the last stage. The
graph is then cut by `torch.fx.passes.split_module` into one graph per stage, whose inputs are parameters,
buffers and batch tensors it reads itself, and the values an earlier stage computed: each such value is a
transfer from its stage to the reading one (`Transfer`).

Refused, each with what to change: a split point that names no module or a module not run by the forward,
split points out of execution order (a stage without a node), a value that flows back to an earlier stage,
and a parameter read by two stages (tied weights: untie them, or put both users in one stage).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from slicer.core.errors import FrontendError

from .module_paths import module_paths

STAGE_KEY = "slicer_stage"  # the key of a node's stage in its "custom" metadata


@dataclass(frozen=True)
class Transfer:
    """A value computed by stage `source` and read by the stages `targets`, forward (its gradient goes back the
    other way, summed over the targets, when `differentiable`): `name` is unique in the step; `shape` and `dtype`
    (torch's name: float32, int64...) are one micro-batch's."""

    name: str
    source: int
    targets: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str
    differentiable: bool


@dataclass(frozen=True)
class StageGraph:
    """One stage's forward: `module` (an fx GraphModule of aten ops) takes `inputs` in order, each a name of the
    step (a batch tensor, parameter or buffer) or a received `Transfer`'s name, and returns `outputs` in order:
    the names of the transfers it sends, or ("loss",) for the last stage."""

    index: int
    module: object
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def split_points(model, split, stages: int | None) -> list[str]:
    """The module names that begin stages 1, 2, ...: `split` checked against `model`'s modules (FrontendError
    naming the closest otherwise)."""
    names = [n for n, _ in model.named_modules() if n]
    if split is None:
        raise FrontendError("pipeline: give split=[module names that begin each later stage] (e.g. ['blocks.4']) "
                            "or stages=N")
    if isinstance(split, str) or not split:
        raise FrontendError(f"pipeline: split= takes a non-empty list of module names, got {split!r}")
    for point in split:
        if point not in names:
            close = [n for n in names if n.startswith(str(point).rsplit(".", 1)[0])][:4]
            raise FrontendError(f"pipeline: split point {point!r} names no module of the model (modules like: "
                                f"{', '.join(close or names[:6])})")
    if len(set(split)) != len(split):
        raise FrontendError(f"pipeline: split points {list(split)} repeat a module")
    return list(split)


@contextlib.contextmanager
def stage_marks(torch, model, points: list[str]):
    """While tracing: every node torch creates is tagged with the stage running (0 before the first split
    point's module starts, i after split point i-1's)."""
    from torch.fx import traceback as fx_traceback  # optional dependency, like torch itself

    def entering(stage: int):
        def hook(module, args):
            fx_traceback.current_meta.setdefault("custom", {})[STAGE_KEY] = stage
        return hook

    handles = [model.get_submodule(p).register_forward_pre_hook(entering(i + 1)) for i, p in enumerate(points)]
    had = "custom" in fx_traceback.current_meta
    before = dict(fx_traceback.current_meta.get("custom", {}))
    fx_traceback.current_meta["custom"] = {**before, STAGE_KEY: 0}
    try:
        with fx_traceback.preserve_node_meta():
            fx_traceback.current_meta.setdefault("custom", {})[STAGE_KEY] = 0
            yield
    finally:
        for handle in handles:
            handle.remove()
        if had:
            fx_traceback.current_meta["custom"] = before
        else:
            fx_traceback.current_meta.pop("custom", None)


def split_forward(torch, model, loss_fn, names: list[str], values: list, count: int,
                  points: list[str]) -> list[StageGraph]:
    """The stage graphs of `loss_fn(model, *batch)`: `names` and `values` are the step's tensors in the order the
    traced function takes them: `count` parameters and buffers, then the micro-batch's batch tensors."""
    from torch.fx.experimental.proxy_tensor import make_fx  # optional dependency
    from torch.fx.passes.split_module import split_module

    class StagedLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *batch):
            return loss_fn(self.model, *batch)

    wrapper = StagedLoss()

    def forward(*tensors):
        named = {f"model.{n}": t for n, t in zip(names[:count], tensors[:count])}
        return torch.func.functional_call(wrapper, named, tuple(tensors[count:]))

    with stage_marks(torch, model, points), module_paths(torch, model):  # this order: see module_paths
        try:
            graph = make_fx(forward, tracing_mode="fake")(*values)
        except FrontendError:
            raise
        except Exception as exc:
            raise FrontendError(f"pipeline: the forward of the step could not be traced to cut it into stages: "
                                f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
    return _cut(graph, names, count, len(points) + 1, split_module)


def _stage(node) -> int:
    return (node.meta.get("custom") or {}).get(STAGE_KEY, 0)


def _cut(graph, names: list[str], owned: int, count: int, split_module) -> list[StageGraph]:
    """`graph` cut into `count` stage graphs (see the module docstring)."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    readers: dict[str, set[int]] = {}
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        for arg in node.all_input_nodes:
            if arg.op == "placeholder":
                readers.setdefault(arg.name, set()).add(_stage(node))
            elif _stage(arg) > _stage(node):
                raise FrontendError(f"pipeline: stage {_stage(node)} reads a value stage {_stage(arg)} computes "
                                    f"({node.target} reads {arg.target}); split points must follow the order in "
                                    "which the forward runs the modules")
    for name, node in zip(names[:owned], placeholders):
        stages = readers.get(node.name, set())
        if len(stages) > 1:
            raise FrontendError(f"pipeline: {name} is read by stages {sorted(stages)} (a tied weight?); each "
                                "parameter and buffer belongs to one stage: untie it or move the split points")
    present = {_stage(n) for n in graph.graph.nodes if n.op == "call_function"}
    missing = sorted(set(range(count)) - present)
    if missing:
        raise FrontendError(f"pipeline: stage(s) {missing} compute nothing: the split points must name modules "
                            "the forward runs, in the order it runs them")
    top = split_module(graph, graph, _stage, keep_original_order=True)
    return _stage_graphs(top, names, placeholders, count)


def _stage_graphs(top, names: list[str], placeholders, count: int) -> list[StageGraph]:
    """The stage graphs of `split_module`'s result `top`: which step tensor or transfer each input is."""
    by_placeholder = {p.name: n for p, n in zip(placeholders, names)}
    top_placeholders = {n.name: by_placeholder[n.name] for n in top.graph.nodes if n.op == "placeholder"}
    produced: dict[object, tuple[int, int]] = {}  # top-level node -> (stage, output position)
    calls = [n for n in top.graph.nodes if n.op == "call_module"]
    for node in top.graph.nodes:
        if node.op == "call_function" and node.args and node.args[0] in calls:
            produced[node] = (int(node.args[0].target.rsplit("_", 1)[1]), node.args[1])
    for call in calls:
        if not any(u in produced for u in call.users):
            produced[call] = (int(call.target.rsplit("_", 1)[1]), -1)  # a single output, used as it is
    outputs: dict[int, list[tuple[int, str]]] = {}
    stages: list[StageGraph] = []
    transfer_of: dict[object, str] = {}
    for call in calls:
        stage = int(call.target.rsplit("_", 1)[1])
        inputs = []
        for arg in call.args:
            if arg.op == "placeholder":
                inputs.append(top_placeholders[arg.name])
                continue
            source, position = produced[arg]
            name = transfer_of.setdefault(arg, f"s{source}.{max(position, 0)}")
            inputs.append(name)
        stages.append(StageGraph(stage, getattr(top, call.target), tuple(inputs), ()))
    for node, name in transfer_of.items():
        outputs.setdefault(produced[node][0], []).append((produced[node][1], name))
    result = []
    for graph in stages:
        sent = tuple(n for _, n in sorted(outputs.get(graph.index, [])))
        result.append(StageGraph(graph.index, graph.module, graph.inputs, sent if graph.index < count - 1
                                 else ("loss",)))
    return sorted(result, key=lambda g: g.index)


__all__ = ["STAGE_KEY", "StageGraph", "Transfer", "split_forward", "split_points", "stage_marks"]
