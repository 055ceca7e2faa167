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
"""

from __future__ import annotations

from dataclasses import dataclass

#: aten ops whose result is their first argument seen another way or copied (recomputed rather than saved).
VIEWS = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze", "slice",
         "select", "alias", "detach", "split", "unbind", "as_strided", "clone", "_to_copy"}


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


def _op(node) -> str:
    return str(getattr(node.target, "__name__", node.target)).split(".")[0]


def partition(torch, joint, front: int, grads: int, owned: int, outputs: int) -> Partition:
    """Cut `joint` (a traced stage whose arguments are `front` batch tensors and received values, `grads`
    gradients of sent values, `owned` parameters and buffers, then the accumulated gradients, and whose
    results are `outputs` forward results then the backward's) as the module docstring says."""
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
    recompute: set = set()
    saved: list = []

    def needed(node) -> None:
        if node.op == "placeholder" or node in recompute or node in saved:
            return
        if node not in batch_dependent or _op(node) in VIEWS:
            recompute.add(node)
            for arg in node.all_input_nodes:
                needed(arg)
        else:
            saved.append(node)

    for node in nodes:
        if node in backward:
            for arg in node.all_input_nodes:
                if arg in forward or arg.op == "placeholder":
                    needed(arg)
    for node in results[outputs:]:
        if node in forward:
            needed(node)
    saved.sort(key=nodes.index)
    fwd = _graph(torch, places[:front] + places[front + grads:front + grads + owned],
                 [n for n in nodes if n in forward and n.op != "placeholder"], results[:outputs] + saved)
    inputs = places[:front] + saved + places[front:]
    bwd = _graph(torch, inputs, [n for n in nodes if (n in backward or n in recompute) and n.op != "placeholder"],
                 results[outputs:])
    kept = []
    for position, node in enumerate(list(bwd.nodes)[:len(inputs)]):
        droppable = position < front or front + len(saved) + grads <= position < len(inputs) - (len(places) - front
                                                                                            - grads - owned)
        kept.append(not (droppable and not node.users))
        if not kept[-1]:
            bwd.erase_node(node)
    return Partition(torch.fx.GraphModule(joint, fwd), torch.fx.GraphModule(joint, bwd), len(saved), tuple(kept))


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


__all__ = ["Partition", "VIEWS", "partition"]
