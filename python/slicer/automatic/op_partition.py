"""What one op does with its operands' tilings in the search's model of propagation and partitioning (the
`Evaluator` of `cost_model.py` remembers the answer per operand states).

Each op takes the tilings its operands bring, in the order of the tactics they come from (an earlier argument
wins, as propagation's earlier tactic does): a tiled operand dim tiles the loop it walks, unless that loop or that
axis is already taken, the dim walks no loop, or the op has a dim on that loop the tiling does not divide and
cannot pad (`OpSketch.even_sizes`); then the operand is all_gathered. A partial sum is all_reduced before the op,
or reduce_scattered when the op's loop it walks is tiled over the same axes. A tiled reduction loop leaves
partial sums; a tiled dim of an embedding table too.
"""

from __future__ import annotations

import math
from typing import Any

from .sketch import OpSketch


def partition_op(ev, op: OpSketch, tiling: dict, prio: dict, partials: dict, through: bool = False) -> tuple:
    """What `op` does with its operands' current tilings, priorities and partial axes, and only those (the
    evaluator remembers it by them, numbered as states, `Evaluator._shapes`: a search prices thousands of
    tilings that differ in one group, so most ops see the same operands again): the operand dims it gathers
    (value, dim, axes, block bytes, gathered bytes, whether it makes the whole copy: a value gathered on two dims
    is gathered one dim after the other) and those operands' positions; per operand the reduction
    of a partial sum (kind, axes, block bytes; empty when none has one) and the share of a fill it makes; its
    results' priority and partial axes; per result (value, tiling, bytes per device, tiled or partial, state);
    and its work for `op_seconds` (the share of its loop nest, bytes stored, bytes read per operand)."""
    loops, gathers, table_axes = assign_loops(ev, op, tiling, prio)
    divide = math.prod(ev.group(a) for a in loops.values()) or 1
    result_prio = min([prio.get(v, 0) for v in op.operands if v >= 0 and any(tiling[v])] or [10 ** 9])
    reduced = frozenset({a for loop, axes in loops.items() if loop in op.reductions for a in axes} | table_axes)
    gathered, running = [], dict[Any, Any]()
    # A value gathered on several dims is gathered one dim after another, into the whole value: the last
    # all_gather's copy is counted whole (`running`). Each transfer stays priced on the shard, as the model's
    # time figures were fitted: pricing the second on the partly gathered copy it moves sent the search on the
    # GPT training step on 2x2 under its budget to a program slower compiled.
    for k, d, axes in gathers:
        v = op.operands[k]
        local = ev.local_bytes(v, tiling[v])
        running[v] = running.get(v, local) * ev.group(axes)
        gathered.append((v, d, axes, local, running[v]))
    last = {g[0]: i for i, g in enumerate(gathered)}
    copies = [(*g, last[g[0]] == i) for i, g in enumerate(gathered)]  # + whether it makes the whole copy
    reductions, fill_divides = list[Any](), []
    for k, v in enumerate(op.operands):
        uses = op.operand_loops[k] if op.ruled and k < len(op.operand_loops) else ()
        fill_divides.append(math.prod(ev.group(loops[u]) for u in uses if u in loops))
        partial = partials.get(v) if v >= 0 else None
        if partial and k == 0 and through:
            reduced |= partial  # the view's reader slices the partial sums: reduced there (see `_Run.op`)
            partial = None
        if not partial:
            reductions.append(None)
            continue
        axes = ev.mesh_order(partial)
        scatter = [d for d, u in enumerate(uses) if u is not None and loops.get(u) == axes and not tiling[v][d]]
        # (`spmd/bucketing.py` buckets a reduce_scatter of dim 0 only)
        reductions.append(("reduce_scatter" if scatter else "all_reduce", axes, ev.local_bytes(v, tiling[v]),
                           not scatter or scatter[0] == 0))
    results, produced = [], 0
    for r, v in enumerate(op.results):
        if v < 0:
            continue
        uses = op.result_loops[r] if op.ruled and r < len(op.result_loops) else ()
        result = tuple(loops.get(u, ()) if u is not None else () for u in uses) or ((),) * len(ev.sketch.shapes[v])
        nbytes = 0 if op.cheap or v in ev.root else ev.local_bytes(v, result)
        results.append((v, result, nbytes, bool(reduced or any(result)), ev.state_id(result, result_prio, reduced)))
        produced += nbytes
    read = [ev._nbytes[v] // share if v >= 0 and v not in ev.cheap_values else 0
            for v, share in zip(op.operands, fill_divides)]  # each operand's block the device walks
    return (tuple(copies), {k for k, _, _ in gathers}, tuple(reductions) if any(reductions) else (),
            tuple(fill_divides), result_prio, reduced, tuple(results), (divide, produced, tuple(read)))


def assign_loops(ev, op: OpSketch, tiling: dict, prio: dict):
    """Loop -> axes from the tiled operands in priority order; the operand dims that must be gathered and
    the axes of tiled table dims (partial sums)."""
    wanted = []
    nbytes = ev._nbytes
    for k, v in enumerate(op.operands):
        if v < 0:
            continue
        for d, axes in enumerate(tiling[v]):
            if axes:
                wanted.append((prio.get(v, 0), -nbytes[v], k, d, axes))
    loops: dict[int, tuple[str, ...]] = {}
    used: set[str] = set()
    gathers, table_axes = [], set()
    for _, _, k, d, axes in sorted(wanted):
        loop = op.operand_loops[k][d] if op.ruled and d < len(op.operand_loops[k]) else None
        if (k, d) in op.gathers and not used & set(axes):
            table_axes |= set(axes)
            used |= set(axes)
        elif loop is not None and loops.get(loop) == axes:
            continue
        elif loop is None or loop in loops or used & set(axes) or (loop in op.reductions and not op.summable) \
                or (op.even_sizes and op.even_sizes[loop] % ev.group(axes)):
            gathers.append((k, d, axes))  # (the last: a dim the tiling does not divide, where it cannot be padded)
        else:
            loops[loop] = axes
            used |= set(axes)
    return loops, gathers, table_axes
