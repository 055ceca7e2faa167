"""Who reads which value in a sketch, read once per program for the search's evaluations (`cost_model.Evaluator`):
the value whose bytes each view shares, each value's last reader, the last op that may read a gathered copy of it,
and the ops reading each view's result."""

from __future__ import annotations

from .sketch import VIEW_OPS, Sketch


def view_roots(sketch: Sketch) -> dict[int, int]:
    """Each view's result (expand_shape, collapse_shape, cast) -> the value whose bytes it shares (a view of a
    view: the first value), so its uses keep that value alive and it stores nothing of its own."""
    roots: dict[int, int] = {}
    for op in sketch.ops:
        if op.name in VIEW_OPS and op.operands and op.operands[0] >= 0:
            for v in op.results:
                if v >= 0:
                    roots[v] = roots.get(op.operands[0], op.operands[0])
    return roots


def view_readers(sketch: Sketch, views: list[bool]) -> dict[int, tuple[int, ...]]:
    """Per view op, the ops other than views that read its result, directly or through more views."""
    readers: dict[int, list[int]] = {}
    for index, op in enumerate(sketch.ops):
        for v in op.operands:
            if v >= 0:
                readers.setdefault(v, []).append(index)
    found: dict[int, tuple[int, ...]] = {}
    for index in reversed(range(len(sketch.ops))):  # a view's reader views come later: already found
        if views[index]:
            found[index] = tuple(r2 for v in sketch.ops[index].results if v >= 0 for r in readers.get(v, ())
                                 for r2 in (found.get(r, ()) if views[r] else (r,)))
    return found


def copy_reads(sketch: Sketch, op_roots: list[tuple[int, ...]]) -> dict[int, int]:
    """Per value, the last op that may read a gathered copy of it: any reader but one that reads it element for
    element into a result of the same loops (an optimizer's update of a weight: it runs on the weight's own
    block). The compiled program keeps the copy a value's first all_gather makes for every later such reader:
    the backward's transposes and products of a weight read the forward's copy."""
    until = {}
    for index, (op, roots) in enumerate(zip(sketch.ops, op_roots)):
        for k, r in enumerate(roots):
            if r < 0:
                continue
            loops = op.operand_loops[k] if op.ruled and k < len(op.operand_loops) else None
            if loops is None or op.reductions or loops not in op.result_loops:
                until[r] = index
    return until


def last_uses(sketch: Sketch, roots: dict[int, int]) -> dict[int, int]:
    """The index of the last op that reads each value, a view's reads counted for the value it shares
    (results: past the last op)."""
    last = {}
    for index, op in enumerate(sketch.ops):
        for v in op.operands:
            if v >= 0:
                last[v] = index
                last[roots.get(v, v)] = index
    for v in sketch.results:
        last[v] = len(sketch.ops)
        last[roots.get(v, v)] = len(sketch.ops)
    return last
