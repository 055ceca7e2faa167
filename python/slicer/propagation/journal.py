"""The record propagation keeps while it rewrites (`Journal`) and what the engine's worklist is told of each
rewrite (`RewriteListener`): every law goes through them to erase or move ops that existed before it."""

from __future__ import annotations

from dataclasses import dataclass, field

from mlir import ir

from slicer.dialect import walk_ops

from .ir_utils import op_id


class RewriteListener:
    """What the engine's worklist (`worklist.Worklist`) is told about a rewrite, as MLIR's
    `RewriterBase::Listener` is (the Python bindings have no listener for rewrites made outside patterns)."""

    def before(self, op: ir.Operation, anchor: ir.Operation) -> None:
        """A law is about to rewrite at `op`; new ops will stand right before `anchor` in its block."""

    def erasing(self, op: ir.Operation) -> None:
        """`op` (and everything nested in it) is about to be erased."""

    def moving(self, op: ir.Operation, settled: bool = False) -> None:
        """`op` is about to move to the rewrite's insertion point (before the anchor). `settled`: the move
        changes no law's answer at `op` or inside it except the laws merging duplicates (it joins a loop over
        the same range with the same action: `fusion`), so only its position is new."""


@dataclass
class Journal:
    """What propagation did and could not do (for explain() and conflict reports).

    Every law calls `rewriting(op)` once it has decided to rewrite at `op`, before it changes anything, and
    erases or moves ops that existed before the rewrite through `erase` and `move_before`: the engine's
    worklist (`listener`) keeps its table of ops exact with these."""

    blocked: list[tuple[ir.Operation, str]] = field(default_factory=list)
    rewrites: int = 0
    last_law: str = ""  # the name of the law that made the last rewrite (the budget error names it)
    listener: RewriteListener = field(default_factory=RewriteListener)

    # Blocks of values already computed by backward propagation: (producer address, result, dim, range) ->
    # (the block-wise clone, result index). A later slice asking for the same block reuses the clone instead of
    # making another: without this, a value read by two consumers was sliced twice, each slice pushed into its
    # producer in turn (the first one erased before the second appeared), so each level of a chain of such
    # values doubled the work (exponential in depth). Entries are dropped when an op they name is erased.
    blocks: dict[tuple, tuple[ir.Operation, int]] = field(default_factory=dict)
    _keys_of: dict[int, list[tuple]] = field(default_factory=dict)
    # Answers to questions about the IR that laws ask again and again between two rewrites (the late phase asks
    # every loop after a fusion, and many read the same values), kept until the next rewrite (`rewriting`).
    unchanged: dict = field(default_factory=dict)

    def rewriting(self, op: ir.Operation, anchor: ir.Operation | None = None) -> None:
        """About to rewrite at `op` (the op the law matched); new ops go right before `anchor` (default `op`)."""
        self.unchanged.clear()
        self.listener.before(op, op if anchor is None else anchor)

    def erase(self, op: ir.Operation) -> None:
        self.listener.erasing(op)
        if self.blocks:
            for inner in walk_ops(op):
                for key in self._keys_of.pop(op_id(inner), ()):
                    self.blocks.pop(key, None)
        op.erase()

    def remember_block(self, key: tuple, clone: ir.Operation, result: int) -> None:
        self.blocks[key] = (clone, result)
        for named in (key[0], key[3][0], op_id(clone)):
            self._keys_of.setdefault(named, []).append(key)

    def move_before(self, op: ir.Operation, anchor: ir.Operation, settled: bool = False) -> None:
        self.listener.moving(op, settled)
        op.move_before(anchor)
