"""The rule table's data: how each dim of an op's operands and results relates to its loops.

An `OpRule` describes one op as a loop nest (docs/propagation.md): every operand
and result dim either walks one loop dim `d_i` (`DimUse.loop == i`) or cannot be
tiled (`DimUse.reason` says why, e.g. it is indexed by `d0 + d1`). Loops are
"parallel" or "reduction"; a reduction can be split into partial results only if
the op combines into each result by addition (`OpRule.combiners`).

Details: docs/module-notes.md, `rules/table.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from slicer.core.errors import InternalError
from slicer.core.linalg_facts import PARALLEL
from slicer.dialect import SumAction, TileAction
from slicer.dialect.attributes import Action


@dataclass(frozen=True)
class DimUse:
    """One operand/result dim: the loop dim it walks, or why it walks none (blocks tiling it).

    `involves` lists the loop dims a non-plain index mentions (`d0 + d1` -> (0, 1)):
    tiling one of them would need this dim sliced in a way a block cannot express.
    """

    loop: int | None
    reason: str | None = None
    involves: tuple[int, ...] = ()

    @staticmethod
    def walks(loop: int) -> DimUse:
        return DimUse(loop)

    @staticmethod
    def blocked(reason: str, involves: tuple[int, ...] = ()) -> DimUse:
        return DimUse(None, reason, tuple(involves))


@dataclass(frozen=True)
class RuleOutcome:
    """What tiling one operand/result dim does to an op (see the module docstring)."""

    loop: int | None = None
    actions: tuple[Action, ...] = ()
    slices: tuple[tuple[int, int], ...] = ()
    zero_inits: tuple[int, ...] = ()
    blocked: str | None = None
    gather: tuple[int, int] | None = None
    shift: tuple[int, int] | None = None

    @property
    def ok(self) -> bool:
        return self.blocked is None

    @property
    def action(self) -> Action:
        """The action of the op's single result (or the one action all results share)."""
        if not self.ok:
            raise InternalError(f"the rule is blocked: {self.blocked}")
        if len(set(self.actions)) != 1:
            raise InternalError(f"the results are rebuilt with different actions {self.actions}; use .actions")
        return self.actions[0]

    @property
    def slice_map(self) -> dict[int, int]:
        """Operand index -> dim to slice."""
        return dict(self.slices)

    @staticmethod
    def block(reason: str, loop: int | None = None) -> RuleOutcome:
        return RuleOutcome(loop=loop, blocked=reason)


@dataclass(frozen=True)
class OpRule:
    """An op seen as a loop nest: iterator types, dim uses of operands and results, combiners.

    `combiners[r]` is None when result `r` is combined by an addition across a
    reduction loop, else the reason it is not. `loop_blocks[i]` blocks tiling
    loop `i` whatever the dim (e.g. the body reads `linalg.index i`). `gathers` lists the (operand, dim)
    pairs of gathered tables whose indexed dim a masked lookup may tile (`gathers.py`); `index_shifts` the
    (loop, trip count) of reduction loops whose index the body reads (a one-hot pick compares it with a target):
    a block reads it shifted by its start (`RuleOutcome.shift`). The last `tables` operands are the tables
    the body reads by index.
    """

    op_name: str
    iterator_types: tuple[str, ...]
    operands: tuple[tuple[DimUse, ...], ...]
    results: tuple[tuple[DimUse, ...], ...]
    combiners: tuple[str | None, ...] = ()
    loop_blocks: tuple[tuple[int, str], ...] = ()
    operand_names: tuple[str, ...] = field(default=())
    gathers: tuple[tuple[int, int], ...] = ()
    index_shifts: tuple[tuple[int, int], ...] = ()
    tables: int = 0

    def __post_init__(self) -> None:
        if not self.combiners:
            object.__setattr__(self, "combiners", (None,) * len(self.results))
        if not self.operand_names:
            object.__setattr__(self, "operand_names", tuple(f"operand #{k}" for k in range(len(self.operands))))

    def tile(self, *, operand: int | None = None, result: int | None = None, dim: int) -> RuleOutcome:
        """The outcome of tiling dim `dim` of operand `operand` (or of result `result`)."""
        if (operand is None) == (result is None):
            raise InternalError("OpRule.tile: give exactly one of operand= or result=")
        if operand is not None:
            uses, what = self._dims(self.operands, operand, "operand"), self.operand_names[operand]
        else:
            uses, what = self._dims(self.results, result, "result"), f"result #{result}"
        if not 0 <= dim < len(uses):
            raise InternalError(f"{self.op_name}: {what} has {len(uses)} dims, there is no dim {dim}")
        use = uses[dim]
        if operand is not None and (operand, dim) in self.gathers:
            return RuleOutcome(actions=(SumAction(),) * len(self.results), slices=((operand, dim),),
                               gather=(operand, dim))
        if use.loop is None:
            return RuleOutcome.block(f"{self.op_name}: {what} dim {dim} {use.reason}")
        return self.tile_loop(use.loop)

    def tile_loop(self, loop: int) -> RuleOutcome:
        """The outcome of tiling loop dim `d_loop` (what any dim walking it leads to)."""
        name = self.op_name
        for blocked_loop, reason in self.loop_blocks:
            if blocked_loop == loop:
                return RuleOutcome.block(f"{name}: loop d{loop} cannot be tiled: {reason}", loop)
        slices = []
        for k, uses in enumerate(self.operands):
            dims = [j for j, use in enumerate(uses) if use.loop == loop]
            if len(dims) > 1:
                return RuleOutcome.block(f"{name}: {self.operand_names[k]} walks loop d{loop} in several dims "
                                         f"({', '.join(map(str, dims))}), so no single dim can be sliced", loop)
            mixed = [j for j, use in enumerate(uses) if loop in use.involves]
            if mixed:
                j = mixed[0]
                return RuleOutcome.block(f"{name}: {self.operand_names[k]} dim {j} {uses[j].reason} (it mixes "
                                         f"loop d{loop} with other loops), so it cannot be sliced along d{loop}", loop)
            if dims:
                slices.append((k, dims[0]))
        if self.iterator_types[loop] == PARALLEL:
            actions = []
            for r, uses in enumerate(self.results):
                dims = [e for e, use in enumerate(uses) if use.loop == loop]
                if len(dims) != 1:
                    return RuleOutcome.block(f"{name}: result #{r} does not walk parallel loop d{loop} in exactly "
                                             "one dim, so its blocks cannot be concatenated", loop)
                actions.append(TileAction(dims[0]))
            return RuleOutcome(loop=loop, actions=tuple(actions), slices=tuple(slices))
        for r, combiner_problem in enumerate(self.combiners):
            if combiner_problem is not None:
                return RuleOutcome.block(f"{name}: loop d{loop} is a reduction and result #{r}'s {combiner_problem}, "
                                         "so partial results cannot be added up", loop)
        inits = tuple(self._num_own_operands() - len(self.results) + r for r in range(len(self.results)))
        shift = next((s for s in self.index_shifts if s[0] == loop), None)
        return RuleOutcome(loop=loop, actions=(SumAction(),) * len(self.results), slices=tuple(slices),
                           zero_inits=inits, shift=shift)

    def _num_own_operands(self) -> int:
        """The op's own operands (inputs, then inits), without the tables its body reads (`gathers.py`)."""
        return len(self.operands) - self.tables

    @staticmethod
    def _dims(table, index: int, kind: str) -> tuple[DimUse, ...]:
        if not 0 <= index < len(table):
            raise InternalError(f"there is no {kind} #{index} ({len(table)} {kind}s)")
        return table[index]

