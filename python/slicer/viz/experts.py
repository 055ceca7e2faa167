"""Expert parallelism in a compiled program's reports: the all_to_alls that dispatch tokens to their experts and
combine the experts' outputs back (with their bytes), and how many experts each device holds.

An all_to_all is a *dispatch* when it moves a value from the tiling an input's tactic gave it (the batch, data
parallel) to the tiling a parameter's tactic needs (the stacked experts, `strategies.expert_parallel`), a
*combine* when it moves one back: read from the partitioner's provenance of the collective (its source's
tactic and the conflicting tactic that needs the other tiling). In a training step the backward moves the same
two ways (the outputs' gradient to the experts is a dispatch, the dispatched tokens' gradient back a combine),
so a MoE layer is 2 dispatches and 2 combines. The experts are the parameters dispatches go to; each device
holds the block of dim 0 (the experts) its tiling leaves it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlir import ir

from slicer.core.names import ALL_TO_ALL
from slicer.dialect import make_context
from slicer.lowering import KernelGraph
from slicer.spmd.report import CollectiveEntry, report

_SOURCE = re.compile(r"source: .*?\(tactic Tile\((?:arg|result)='([^']+)'")
_NEEDED = re.compile(r"but Tile\((?:arg|result)='([^']+)'[^)]*\) needs")
_KINDS = {("input", "parameter"): "dispatch", ("parameter", "input"): "combine"}
_COUNTED = {ALL_TO_ALL: "all_to_all"}  # the collectives a dispatch or combine is (the partitioner's moves)
_WHAT = {"dispatch": "tokens to their experts", "combine": "the experts' outputs back to their tokens"}


@dataclass(frozen=True)
class ExpertMove:
    """One all_to_all between the batch's tiling and the experts': its number in the function's collectives."""

    number: int
    kind: str  # "dispatch" or "combine"
    experts: str  # the stacked expert weight whose tactic tiles the experts' side
    bytes_received_per_device: int


@dataclass(frozen=True)
class ExpertPlacement:
    """A stacked expert weight: the experts (its dim 0) each device holds of all of them."""

    name: str
    per_device: int
    experts: int

    def text(self) -> str:
        return f"{self.name}: {self.per_device} of {self.experts} experts per device"


def expert_moves(collectives: Sequence[CollectiveEntry], roles: Mapping[str, str]) -> list[ExpertMove]:
    """The dispatches and combines among one function's `collectives` (numbered from 1, as listed), by the
    roles of the arguments their tactics name (`roles`: argument name -> "input", "parameter", ...)."""
    moves = []
    for number, c in enumerate(collectives, 1):
        source, needed = _SOURCE.search(c.why), _NEEDED.search(c.why)
        if c.op not in _COUNTED or source is None or needed is None:
            continue
        kind = _KINDS.get((roles.get(source[1], ""), roles.get(needed[1], "")))
        if kind is not None:
            experts = needed[1] if kind == "dispatch" else source[1]
            moves.append(ExpertMove(number, kind, experts, c.bytes_received_per_device))
    return moves


def expert_placements(graph: KernelGraph, names: Sequence[str | None], experts: set[str]) -> list[ExpertPlacement]:
    """The experts each device holds of each stacked expert weight (in argument order): the arguments named in
    `experts`, and those of the same modules with the same number of experts tiled the same way on dim 0 (the
    expert weights no conflict names, e.g. the second layer's)."""
    found = []  # (name, experts, experts per device, (module, experts, dim 0's tiling))
    for index, value in enumerate(graph.args):
        name, shape = (names[index] if index < len(names) else None), graph.arg_shape(index)
        if name and shape:
            info = graph.values[value]
            found.append((name, shape[0], min(info.local_shape[0], shape[0]),
                          (_module(name), shape[0], info.dist.dims[0])))
    kinds = {kind for name, *_, kind in found if name in experts and kind[2]}
    return [ExpertPlacement(name, per_device, count) for name, count, per_device, kind in found if kind in kinds]


def _module(name: str) -> str:
    """The module a stacked expert weight belongs to: an imported ModuleList's (`moe.experts` of
    `moe.experts.w1.weight`, `training_step(..., stacked=...)`), else the parameter's own (`moe`)."""
    found = _LISTED.match(name)
    return found[1] if found else name.rpartition(".")[0]


_LISTED = re.compile(r"(.*\bexperts?)\.", re.IGNORECASE)


def expert_lines(moves: Sequence[ExpertMove], placements: Sequence[ExpertPlacement]) -> list[str]:
    """explain()'s section (empty without expert moves)."""
    if not moves:
        return []
    lines = ["expert parallel:"]
    for kind in ("dispatch", "combine"):
        mine = [m for m in moves if m.kind == kind]
        total = sum(m.bytes_received_per_device for m in mine)
        lines.append(f"  {kind} ({_WHAT[kind]}): {len(mine)} all_to_alls, {total} B received per device")
        lines += [f"    #{m.number} to {m.experts if kind == 'dispatch' else 'the tokens'} from "
                  f"{'the tokens' if kind == 'dispatch' else m.experts}: {m.bytes_received_per_device} B"
                  for m in mine]
    lines += [f"  {p.text()}" for p in placements]
    return lines


def experts_per_device(spmd: str, graph: KernelGraph, names: Sequence[str | None],
                       roles: Sequence[str]) -> tuple[str, ...]:
    """The memory report's lines: each stacked expert weight's experts per device (`expert_report`)."""
    return tuple(p.text() for p in expert_report(spmd, graph, names, roles)[1])


def expert_report(spmd: str, graph: KernelGraph, names: Sequence[str | None],
                  roles: Sequence[str]) -> tuple[list[ExpertMove], list[ExpertPlacement]]:
    """(the dispatches and combines, the experts per device) of an SPMD program's entry function whose arguments
    are `names` with `roles` (an imported training step's); none without roles."""
    if not roles:
        return [], []
    with make_context():
        found = report(ir.Module.parse(spmd)).collectives
    named = {n: r for n, r in zip(names, roles, strict=False) if n}
    moves = expert_moves([c for c in found if c.function == graph.entry], named)
    return moves, expert_placements(graph, names, {m.experts for m in moves})
