"""Split points placed so that pipeline stages cost about the same (`strategies.pipeline(..., stages=N)`).

The candidates are the model's top-level modules in the order the forward runs them, a `ModuleList` or
`Sequential` counted by its items (a GPT's embeddings, each block, the final norm, the head). Each is priced
by the FLOPs of its forward on one micro-batch, as torch's `FlopCounterMode` counts them (matrix products and
convolutions: what dominates a stage's time, forward and backward alike); the FLOPs outside every candidate
(the loss) go to the last one. The cuts minimise the most expensive stage (the classic linear partition, by
dynamic programming over the candidates), and each later stage begins at its first candidate's module.
"""

from __future__ import annotations

from slicer.core.errors import FrontendError


def _units(torch, model) -> list[str]:
    """The candidate modules' names (module docstring), not yet in execution order."""
    units = []
    for name, child in model.named_children():
        if isinstance(child, (torch.nn.ModuleList, torch.nn.Sequential)):
            units += [f"{name}.{item}" for item, _ in child.named_children()]
        else:
            units.append(name)
    return units


def unit_costs(torch, model, loss_fn, batch) -> list[tuple[str, int]]:
    """(candidate module, forward FLOPs) in the order the forward runs them, on `batch` (one micro-batch)."""
    from torch.utils.flop_counter import FlopCounterMode  # optional dependency, like torch itself

    order: list[str] = []
    handles = [model.get_submodule(n).register_forward_pre_hook(lambda m, a, n=n: order.append(n))
               for n in _units(torch, model)]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            loss_fn(model, *batch)
    finally:
        for handle in handles:
            handle.remove()
    counts = {k: sum(v.values()) for k, v in counter.get_flop_counts().items()}
    prefix = type(model).__name__ + "."
    ran = list(dict.fromkeys(order))
    costs = [(n, counts.get(prefix + n, 0)) for n in ran]
    rest = counts.get("Global", 0) - sum(c for _, c in costs)
    if costs:
        costs[-1] = (costs[-1][0], costs[-1][1] + max(0, rest))
    return costs


def balanced_split(costs: list[tuple[str, int]], stages: int) -> list[str]:
    """The split points (names of the first module of stages 1..N-1) minimising the costliest stage."""
    if stages > len(costs):
        raise FrontendError(f"pipeline: stages={stages} but the model has only {len(costs)} top-level modules to "
                            f"cut between ({', '.join(n for n, _ in costs)}); give fewer stages or split=[...]")
    prefix = [0]
    for _, cost in costs:
        prefix.append(prefix[-1] + cost)
    count = len(costs)
    inf = float("inf")
    # best[k][i]: the costliest stage when the first i candidates form k stages; cut[k][i]: where the last begins
    best = [[inf] * (count + 1) for _ in range(stages + 1)]
    cut = [[0] * (count + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, count + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    starts, i = [], count
    for k in range(stages, 0, -1):
        i = cut[k][i]
        starts.append(i)
    return [costs[s][0] for s in sorted(starts)[1:]]


__all__ = ["balanced_split", "unit_costs"]
