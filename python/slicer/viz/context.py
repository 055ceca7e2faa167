"""Context parallelism by heads in a compiled program's report: the all_to_alls that move attention's inputs from
sequence-tiled to head-tiled and its outputs back (`strategies.context_parallel(..., method="all_to_all")`), with
their bytes.

`frontends/context_heads.py` names the location of each annotation it inserts (`CONTEXT_TO_HEADS_LOC`,
`CONTEXT_TO_SEQUENCE_LOC`), and the partitioner keeps the annotation's location among the places of the
collective that carries it out: an all_to_all at such a place is that move. A training step moves q, k, v and
the output's gradient to heads and the output and the gradients of q, k, v back: 4 and 4 per attention.
"""

from __future__ import annotations

from slicer.core.names import ALL_TO_ALL, CONTEXT_TO_HEADS_LOC, CONTEXT_TO_SEQUENCE_LOC
from slicer.spmd.report import CollectiveEntry, Report

_MOVED_BY = {ALL_TO_ALL: "all_to_all"}  # the collectives these moves are (the partitioner's choice for them)
_WAYS = ((CONTEXT_TO_HEADS_LOC, "to heads (attention's inputs)"),
         (CONTEXT_TO_SEQUENCE_LOC, "back to the sequence (attention's outputs)"))


def context_lines(found: Report, function: str) -> list[str]:
    """explain()'s section for `function`'s collectives (numbered from 1, as listed; empty without such moves)."""
    mine = [c for c in found.collectives if c.function == function]
    ways: dict[str, list[tuple[int, CollectiveEntry]]] = {name: [] for name, _ in _WAYS}
    for number, c in enumerate(mine, 1):
        way = next((name for name, _ in _WAYS if any(name in p.text for p in c.places)), None)
        if c.op in _MOVED_BY and way is not None:
            ways[way].append((number, c))
    if not any(ways.values()):
        return []
    lines = ["context parallel (all_to_all by heads):"]
    for name, what in _WAYS:
        moves = ways[name]
        total = sum(c.bytes_received_per_device for _, c in moves)
        lines.append(f"  {what}: {len(moves)} all_to_alls, {total} B received per device")
        lines += [f"    #{n} {'x'.join(map(str, c.local_before))} -> {'x'.join(map(str, c.local_after))}: "
                  f"{c.bytes_received_per_device} B" for n, c in moves]
    return lines


__all__ = ["context_lines"]
