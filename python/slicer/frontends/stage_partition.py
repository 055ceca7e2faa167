"""A pipeline stage's joint graph (its forward and, by autograd, its backward, traced once) cut into the forward
program and the backward program, the forward keeping for the backward the values it needs (`saved`).

The forward is every node the forward's results depend on; the backward is every other node its results need.
What the backward reads of the forward is, by kind:
- an argument of the stage (a batch tensor, a received value, a parameter): the backward takes it as well;
- a value that depends on no batch tensor or received value (a transposed weight), or a view of a forward
  value (a reshape, a transpose): recomputed in the backward, so that no micro-batch keeps a copy of a weight
  and a view's base is kept once;
- any other value (an activation): a result of the forward, an argument of the backward (`saved`).
This is AOTAutograd's default partition (`torch._functorch.partitioners`) with its recomputation of views, on
a graph whose arguments are Slicer's (the gradients of the sent values and the accumulated gradients among
them), not AOTAutograd's primals and tangents.

Under `Remat` tactics (`slicer.strategies.remat`), a forward value computed inside a module they name (each
node's module path, `module_paths.py`) is recomputed as well unless the tactic's policy keeps it
(`tactics.values.remat_keeps`, the definition `slicer-remat` reads too) or it is the module's output (read by
the forward outside the module, or a result of the forward): under "full" a block's forward saves its input
only. The backward computes each recomputed value right before its first use (each block's recomputation
just before that block's backward, not all at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slicer.spmd.rematerialize import unit_of
from slicer.tactics.values import Remat, remat_keeps
from slicer.viz.remat_memory import RematUnit

from .module_paths import node_module_path

#: aten ops whose result is their first argument seen another way or copied (recomputed rather than saved).
VIEWS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "slice",
         "select", "alias", "detach", "split", "unbind", "as_strided", "clone", "_to_copy"}
CONTRACTIONS = {"mm", "addmm", "bmm", "baddbmm"}
"""aten ops that are contractions (matmuls); those with batch dims: `BATCHED`."""
BATCHED = {"bmm", "baddbmm"}


@dataclass(frozen=True)
class Partition:
    """The forward and backward graphs (fx GraphModules) of a stage and the forward values saved for the
    backward (`saved`: how many; the forward returns its own results then them, the backward takes them after
    the batch tensors and received values). A batch tensor, received value, parameter or buffer the backward does
    not read is not its argument (`kept`): its layout there would be nobody's choice."""

    forward: object
    backward: object
    saved: int
    kept: tuple[bool, ...]  # per argument of the backward as `partition` lists them: still an argument
    remat: tuple[RematUnit, ...] = ()
    """Per module a `Remat` tactic names: the bytes of its values the forward saves for the backward, of those
    it saves without remat but the backward now recomputes, and the nodes recomputed (views not counted); one
    micro-batch's, whole."""


def _op(node) -> str:
    return str(getattr(node.target, "__name__", node.target)).split(".")[0]


def partition(torch, joint, front: int, grads: int, owned: int, outputs: int,
              remat: Sequence[Remat] = ()) -> Partition:
    """Cut `joint` (a traced stage whose arguments are `front` batch tensors and received values, `grads`
    gradients of sent values, `owned` parameters and buffers, then the accumulated gradients, and whose
    results are `outputs` forward results then the backward's) as the module docstring says, recomputing
    in the backward what the `remat` tactics' policies do not keep."""
    graph = joint.graph
    nodes = list(graph.nodes)
    places = [n for n in nodes if n.op == "placeholder"]
    result = next(n for n in nodes if n.op == "output")
    results = list(result.args[0])
    forward = _ancestors(results[:outputs])
    backward = _ancestors(results[outputs:]) - forward
    batch_dependent = set(places[:front])
    for node in nodes:
        if any(a in batch_dependent for a in node.all_input_nodes):
            batch_dependent.add(node)
    member, dropped = _remat_members(nodes, forward, set(results[:outputs]), remat)
    recompute, kept = _walk(nodes, forward, backward, results[outputs:], batch_dependent, dropped)
    index = {n: i for i, n in enumerate(nodes)}
    saved = sorted(kept, key=index.__getitem__)
    fwd = _graph(torch, places[:front] + places[front + grads:front + grads + owned],
                 [n for n in nodes if n in forward and n.op != "placeholder"], results[:outputs] + saved)
    inputs = places[:front] + saved + places[front:]
    bwd = _graph(torch, inputs, _in_use_order(nodes, backward, recompute), results[outputs:])
    still = []
    for position, node in enumerate(list(bwd.nodes)[:len(inputs)]):
        droppable = position < front or front + len(saved) + grads <= position < len(inputs) - (len(places) - front
                                                                                            - grads - owned)
        still.append(not (droppable and not node.users))
        if not still[-1]:
            bwd.erase_node(node)
    plain = _walk(nodes, forward, backward, results[outputs:], batch_dependent, set())[1] if dropped else kept
    units = _report(member, recompute, kept, plain)
    return Partition(torch.fx.GraphModule(joint, fwd), torch.fx.GraphModule(joint, bwd), len(saved), tuple(still),
                     units)


def _remat_members(nodes, forward: set, results: set, remat: Sequence[Remat]) -> tuple[dict, set]:
    """(the unit and tactic of every forward node computed inside a module a `remat` tactic names, the nodes
    among them its policy does not keep: neither kept by `remat_keeps` nor the module's output)."""
    member: dict = {}
    for node in nodes:
        if node in forward and node.op == "call_function":
            path = node_module_path(node)
            for tactic in remat:
                unit = unit_of(path, tactic.pattern)
                if unit is not None:
                    member[node] = (unit, tactic)
                    break
    dropped = set()
    for node, (unit, tactic) in member.items():
        op = _op(node)
        if node in results or remat_keeps(tactic.policy, tactic.names, node_module_path(node),
                                          contraction=op in CONTRACTIONS, batched=op in BATCHED):
            continue
        if any(user in forward and member.get(user, (None,))[0] != unit for user in node.users):
            continue  # read by the forward outside the unit: its output
        dropped.add(node)
    return member, dropped


def _walk(nodes, forward: set, backward: set, results: list, batch_dependent: set, dropped: set) -> tuple[set, set]:
    """(the forward nodes the backward recomputes, those it reads from the forward: saved), from the values
    the backward reads (module docstring)."""
    recompute: set = set()
    kept: set = set()
    stack = [a for n in nodes if n in backward for a in n.all_input_nodes if a in forward or a.op == "placeholder"]
    stack += [n for n in results if n in forward]
    while stack:
        node = stack.pop()
        if node.op == "placeholder" or node in recompute or node in kept:
            continue
        if node not in batch_dependent or _op(node) in VIEWS or node in dropped:
            recompute.add(node)
            stack.extend(node.all_input_nodes)
        else:
            kept.add(node)
    return recompute, kept


def _report(member: dict, recompute: set, kept: set, plain: set) -> tuple[RematUnit, ...]:
    """Per remat unit (see `RematUnit`): the bytes of its values saved (`kept`), and of those saved without
    remat (`plain`) but not now, and how many of its nodes are recomputed (views not counted)."""
    figures: dict[str, list] = {}
    for node, (unit, tactic) in member.items():
        entry = figures.setdefault(unit, [tactic.policy, 0, 0, 0])
        entry[1] += _bytes(node) if node in kept else 0
        entry[2] += _bytes(node) if node in plain and node not in kept else 0
        entry[3] += 1 if node in recompute and _op(node) not in VIEWS else 0
    return tuple(RematUnit(unit, *entry) for unit, entry in figures.items())


def _bytes(node) -> int:
    value = node.meta.get("val")
    return int(value.numel() * value.element_size()) if hasattr(value, "element_size") else 0


def _in_use_order(nodes, backward: set, recompute: set) -> list:
    """The backward's nodes in the joint graph's order, but those that only see forward values another way or
    compute them again (`recompute`; views of forward values: autograd's detached copies of what it saves, a
    weight's transpose) each right before the first node that needs them, as late as it can be."""
    lazy = set(recompute)
    for node in nodes:
        if node in backward and _op(node) in VIEWS and all(a in lazy or a not in backward
                                                            for a in node.all_input_nodes):
            lazy.add(node)
    end = len(nodes)
    position = {n: i for i, n in enumerate(nodes)}
    anchor: dict = {}
    for node in reversed(nodes):
        if node in lazy:
            anchor[node] = min((anchor[u] if u in lazy else position[u] if u in backward else end
                                for u in node.users if u in lazy or u in backward or u.op == "output"), default=end)
    groups: dict[int, list] = {}
    for node in nodes:
        if node in lazy:
            groups.setdefault(anchor[node], []).append(node)
    order: list = []
    for i, node in enumerate(nodes):
        order += groups.get(i, [])
        if node in backward and node not in lazy and node.op != "placeholder":
            order.append(node)
    return order + groups.get(end, [])


def _ancestors(roots) -> set:
    seen: set = set()
    stack = [r for r in roots if hasattr(r, "all_input_nodes")]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.all_input_nodes)
    return seen


def _graph(torch, inputs, body, outputs):
    """A new fx graph taking `inputs` (nodes of the joint graph, copied as placeholders with their metadata),
    computing `body` (in order) and returning `outputs`."""
    graph = torch.fx.Graph()
    env: dict = {}
    for index, node in enumerate(inputs):
        env[node] = graph.placeholder(f"arg{index}")
        env[node].meta = dict(node.meta)
    for node in body:
        env[node] = graph.node_copy(node, lambda n: env[n])
    graph.output(tuple(env[n] for n in outputs))
    graph.lint()
    return graph


__all__ = ["BATCHED", "CONTRACTIONS", "Partition", "VIEWS", "partition"]
