"""The pipelined step as one MLIR module: one function per stage (MPMD), the values crossing a cut as
`slicer.send` / `slicer.recv` over the pipeline axis.

    func.func @stage_1(%idx.m0: tensor<2x8xi64>, ..., %blocks.1.ln_1.weight: tensor<32xf32>, ...) -> (...) {
      %0 = "slicer.recv"() {mesh_axis = "p", peer = 0 : i64, tag = 0 : i64} : () -> tensor<2x8x32xf32>
      %1 = func.call @forward_1(%idx.m0, %0, ...) : (...) -> tensor<f32>
      ...
      "slicer.send"(%7) {mesh_axis = "p", peer = 0 : i64, tag = 1 : i64} : (tensor<2x8x32xf32>) -> ()

Each stage's function runs its works in the schedule's order: a forward receives what its stage reads from
earlier stages, calls the stage's forward and sends what later stages read (and keeps what its backward reads,
`saved`); a backward receives the gradients
of what it sent (summed over the stages that read it), calls the stage's backward (which accumulates the
parameters' gradients, from zeros) and sends the gradients of what it received; after the last work each of
its model chunks calls its update once. The micro-batches of the batch are separate arguments (`<name>.m<i>`);
the results are the loss (the last stage: the sum of the micro-batches' losses, each divided by M), then every
new parameter and optimizer state value, under their names. The callees are declared (`forward_<v>`,
`backward_<v>`, `update_<v>` for virtual stage v): each is a program of its own, partitioned over the other
axes of the mesh. A send and its receive carry the same `tag`, unique in the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from slicer.core import names as N

from .pipeline_schedule import BACKWARD, PipelineSchedule

GRAD = "grad."


@dataclass(frozen=True)
class CalleeSignature:
    """A callee's arguments and results: (name, MLIR type) pairs."""

    args: tuple[tuple[str, str], ...]
    results: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Link:
    """A value virtual stage `source` sends to each of `targets` (its gradient back when `differentiable`)."""

    name: str
    source: int
    targets: tuple[int, ...]
    type: str
    differentiable: bool


@dataclass(frozen=True)
class StageFunctions:
    """Virtual stage `index`: its callees and the names its arguments fall into."""

    index: int
    forward: CalleeSignature
    backward: CalleeSignature
    update: CalleeSignature
    batch: tuple[str, ...]
    received: tuple[str, ...]
    sent: tuple[str, ...]
    saved: tuple[str, ...]  # the forward's results after the sent values, the backward's arguments
    owned: tuple[str, ...]  # parameters and buffers, as the forward takes them
    state: tuple[str, ...]  # optimizer state
    hyper: tuple[str, ...]


class _Body:
    """SSA names and the lines of one function's body."""

    def __init__(self):
        self.lines: list[str] = []
        self.count = 0

    def fresh(self) -> str:
        self.count += 1
        return f"%{self.count - 1}"

    def emit(self, text: str) -> None:
        self.lines.append(f"    {text}")


def _arg(name: str) -> str:
    return "%" + "".join(c if c.isalnum() or c in "._$" else "_" for c in name)


def build_module(schedule: PipelineSchedule, stages: tuple[StageFunctions, ...], links: tuple[Link, ...],
                 axis: str) -> str:
    """The module of the pipelined step (module docstring)."""
    lines = ["module {"]
    for stage in stages:
        for kind in ("forward", "backward", "update"):
            sig = getattr(stage, kind)
            lines.append(f"  func.func private @{kind}_{stage.index}({', '.join(t for _, t in sig.args)}) -> "
                         f"({', '.join(t for _, t in sig.results)})")
    count = schedule.microbatches
    tags = {(link.name, target, grad, m): (2 * (i * len(stages) + target) + grad) * count + m
            for i, link in enumerate(links) for target in link.targets for grad in (0, 1) for m in range(count)}
    for physical in range(schedule.stages):
        lines += _stage_function(schedule, physical, stages, {link.name: link for link in links}, tags, axis)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _stage_function(schedule: PipelineSchedule, physical: int, stages, links: dict, tags: dict, axis: str) -> list[str]:
    """The lines of `@stage_<physical>`."""
    mine = [stages[schedule.virtual_stage(physical, c)] for c in range(schedule.chunks)]
    last = len(stages) - 1
    types = {}
    for stage in mine:
        for sig in (stage.forward, stage.backward, stage.update):
            types.update(dict(sig.args))
    args: list[tuple[str, str]] = []
    for stage in mine:
        for name in stage.batch:
            args += [(f"{name}.m{m}", types[name]) for m in range(schedule.microbatches)
                     if (f"{name}.m{m}", types[name]) not in args]
    for stage in mine:
        args += [(n, types[n]) for n in (*stage.owned, *stage.state) if (n, types[n]) not in args]
        args += [(n, types[n]) for n in stage.hyper if (n, types[n]) not in args]
    env: dict = {name: _arg(name) for name, _ in args}
    body = _Body()
    loss = None
    peer = {v.index: v.index % schedule.stages for v in stages}
    for work in schedule.orders[physical]:
        stage = stages[schedule.virtual_stage(physical, work.chunk)]
        m = work.microbatch
        values = {**env, **{n: env[f"{n}.m{m}"] for n in stage.batch},
                  **{n: env[(n, m)] for n in (*stage.received, *stage.saved) if (n, m) in env}}
        if work.kind == BACKWARD:
            _backward(body, stage, links, tags, axis, peer, values, env, m)
            continue
        for name in stage.received:
            link = links[name]
            env[(name, m)] = values[name] = _recv(body, axis, peer[link.source], tags[(name, stage.index, 0, m)],
                                                  link.type)
        outs = _call(body, "forward", stage, values)
        if stage.index == last:
            loss = outs[0] if loss is None else _add(body, loss, outs[0], stage.forward.results[0][1])
        for name, value in zip(stage.saved, outs[len(outs) - len(stage.saved):]):
            env[(name, m)] = value
        for name, value in zip(stage.sent, outs):
            for target in links[name].targets:
                body.emit(f'"{N.SEND}"({value}) {_p2p(axis, peer[target], tags[(name, target, 0, m)])} : '
                          f"({links[name].type}) -> ()")
    results: list[tuple[str, str]] = []
    if loss is not None:
        results.append((loss, stages[last].forward.results[0][1]))
    for stage in mine:
        values = dict(env)
        for name, typ in stage.update.args:
            if name.startswith(GRAD):
                values[name] = env.get(("acc", stage.index, name)) or _zeros(body, typ)
        outs = _call(body, "update", stage, values)
        results += [(v, t) for v, (_, t) in zip(outs, stage.update.results)]
    signature = ", ".join(f'{env[n]}: {t} {{{N.ARG_NAME_ATTR} = "{n}"}}' for n, t in args)
    named = [("loss", *results[0])] if loss is not None else []
    for stage in mine:
        named += [(n, "", t) for n, t in stage.update.results]
    returns = ", ".join(f'{t} {{{N.ARG_NAME_ATTR} = "{n}"}}' for n, _, t in named)
    lines = [f"  func.func @stage_{physical}({signature}) -> ({returns}) "
             f'attributes {{{N.PIPELINE_STAGE_ATTR} = {physical} : i64}} {{']
    lines += body.lines
    lines.append(f"    func.return {', '.join(v for v, _ in results)} : {', '.join(t for _, t in results)}")
    lines.append("  }")
    return lines


def _backward(body: _Body, stage: StageFunctions, links: dict, tags: dict, axis: str, peer: dict, values: dict,
              env: dict, m: int) -> None:
    """One backward work: the gradients of the sent values received and summed, the callee, the gradients of
    the received values sent."""
    for name in stage.sent:
        link = links[name]
        if not link.differentiable:
            continue
        total = None
        for target in link.targets:
            got = _recv(body, axis, peer[target], tags[(name, target, 1, m)], link.type)
            total = got if total is None else _add(body, total, got, link.type)
        values[GRAD + name] = total
    for name, typ in stage.backward.args:
        if name.startswith(GRAD) and name not in values:
            values[name] = env.get(("acc", stage.index, name)) or _zeros(body, typ)
    outs = _call(body, "backward", stage, values)
    for (name, _), value in zip(stage.backward.results, outs):
        transfer = name[len(GRAD):]
        if transfer in links and transfer in stage.received:
            link = links[transfer]
            body.emit(f'"{N.SEND}"({value}) {_p2p(axis, peer[link.source], tags[(transfer, stage.index, 1, m)])} '
                      f": ({link.type}) -> ()")
        else:
            env[("acc", stage.index, name)] = value


def _call(body: _Body, kind: str, stage: StageFunctions, values: dict) -> list[str]:
    sig = getattr(stage, kind)
    outs = [body.fresh() for _ in sig.results]
    operands = ", ".join(values[n] for n, _ in sig.args)
    head = f"{', '.join(outs)} = " if outs else ""
    body.emit(f"{head}func.call @{kind}_{stage.index}({operands}) : ({', '.join(t for _, t in sig.args)}) -> "
              f"({', '.join(t for _, t in sig.results)})")
    return outs


def _p2p(axis: str, peer: int, tag: int) -> str:
    return f'{{{N.P2P_AXIS_ATTR} = "{axis}", {N.P2P_PEER_ATTR} = {peer} : i64, {N.P2P_TAG_ATTR} = {tag} : i64}}'


def _recv(body: _Body, axis: str, peer: int, tag: int, typ: str) -> str:
    value = body.fresh()
    body.emit(f'{value} = "{N.RECV}"() {_p2p(axis, peer, tag)} : () -> {typ}')
    return value


def _add(body: _Body, a: str, b: str, typ: str) -> str:
    value = body.fresh()
    body.emit(f"{value} = arith.addf {a}, {b} : {typ}")
    return value


def _zeros(body: _Body, typ: str) -> str:
    value = body.fresh()
    element = typ.rsplit("x", 1)[-1].rstrip(">") if "x" in typ else typ[len("tensor<"):-1]
    body.emit(f"{value} = arith.constant dense<0.000000e+00> : {typ}" if element.startswith(("f", "bf"))
              else f"{value} = arith.constant dense<0> : {typ}")
    return value


__all__ = ["Link", "CalleeSignature", "StageFunctions", "build_module"]
