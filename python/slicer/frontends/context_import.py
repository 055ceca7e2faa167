"""A training step imported again with its attention as ring attention over the blocks of a context-parallel
axis (`slicer.strategies.context_parallel`; `decomp_ring.py`, `decomp_zigzag.py`).

The number of blocks is the number of devices the sequence is tiled over, known only once `slicer.compile` has
the mesh: it asks for the step again from what `training_step` imported it from (its `StepOrigin`), with
`F.scaled_dot_product_attention` traced in blocks. The arguments and results keep their names and order, so the
other tactics apply to the new step as they would to the first.

Causal load balancing: where the sequence splits into 2n chunks, the step is traced on its batch in zig-zag order
(`decomp_zigzag.py`: block i holds chunks i and 2n-1-i), `torch.arange` of the sequence's length giving the
positions in that order; the program records the order (`ImportedProgram.input_order`) and permutes the sequence
dims of its inputs where the batch enters (no collective: each device receives its early and its late chunk).
A batch of several sequences: the loss's merge of batch and sequence into rows is traced sequence-major
(`decomp_rows.py`), so that the rows stay where their tokens are. Each order is used only if the model's loss in
torch is the same in it (a forward each way when compiling): a model whose positions come from elsewhere (a
mask buffer, a shift inside the loss) keeps the plain order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from slicer.core.errors import CompileError, FrontendError
from slicer.core.mesh import Mesh
from slicer.tactics import Tile
from slicer.tactics.context_tactic import ContextParallel

from .composites import attention_in_blocks, decomposed_composites
from .context_heads import heads_around_attention
from .decomp_zigzag import zigzag_order
from .program import ImportedProgram
from .stages import StepOrigin
from .torch_import import load_torch
from .training import training_step


def import_in_blocks(step: ImportedProgram, blocks: int, sequence: Mapping[str, int] | None = None
                     ) -> ImportedProgram:
    """`step` imported again with ring attention over `blocks` blocks of the sequence (module docstring);
    `sequence`: the inputs tiled over the blocks and their sequence dim ({name: dim}), load-balanced when they
    can be."""
    origin = step.origin
    if not isinstance(origin, StepOrigin):
        raise FrontendError("context parallelism imports the step again with its attention in blocks: give a step "
                            "imported with slicer.training_step (a program from slicer.from_torch or text cannot "
                            f"be imported again), got {step.source}")
    positions = dict(zip(origin.batch_names, range(len(origin.batch))))
    dims = {positions[n]: d for n, d in (sequence or {}).items() if n in positions}
    balanced, rows = _orders(origin, blocks, dims)
    batch = origin.batch if balanced is None else _in_order(origin.batch, dims, zigzag_order(balanced, blocks))
    with attention_in_blocks(blocks, balanced, rows):
        imported = training_step(origin.model, origin.loss_fn, *batch, optimizer=origin.optimizer,
                                 seed=origin.seed, microbatches=origin.microbatches, precision=origin.precision)
    if balanced is None:
        return replace(imported, origin=origin)
    order = zigzag_order(balanced, blocks)
    return replace(imported, input_order=tuple((i, d, order) for i, d in sorted(dims.items())), origin=origin)


def _in_order(batch: Sequence, dims: Mapping[int, int], order) -> tuple:
    torch = load_torch()[0]
    index = torch.from_numpy(order)
    return tuple(t.index_select(dims[i], index) if i in dims else t for i, t in enumerate(batch))


def _orders(origin: StepOrigin, blocks: int, dims: Mapping[int, int]) -> tuple[int | None, int | None]:
    """(the sequence's length if the step can take its batch in zig-zag order, if it can merge its rows
    sequence-major), each None where it cannot: the first of (both, zig-zag, rows) that applies and gives the
    model's loss in torch (module docstring)."""
    lengths = {int(origin.batch[i].shape[d]) for i, d in dims.items()}
    if len(lengths) != 1:
        return None, None
    length = lengths.pop()
    zigzag = length if blocks > 1 and length % (2 * blocks) == 0 else None
    rows = length if any(d == 1 and origin.batch[i].shape[0] > 1 for i, d in dims.items()) else None
    torch = load_torch()[0]
    buffers = [b.detach().clone() for b in origin.model.buffers()]
    try:
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(origin.seed)
            want = origin.loss_fn(origin.model, *origin.batch)
            for found in dict.fromkeys([(zigzag, rows), (zigzag, None), (None, rows)]):
                if found != (None, None) and want.dim() == 0 and _same_loss(torch, origin, blocks, dims, found, want):
                    return found
    finally:
        with torch.no_grad():
            for buffer, saved in zip(origin.model.buffers(), buffers):
                buffer.copy_(saved)
    return None, None


def _same_loss(torch, origin: StepOrigin, blocks: int, dims: Mapping[int, int], orders, want) -> bool:
    """Whether the loss in torch, traced with `orders` (as `_orders` gives them), is `want`."""
    zigzag, _ = orders
    batch = origin.batch if zigzag is None else _in_order(origin.batch, dims, zigzag_order(zigzag, blocks))
    torch.manual_seed(origin.seed)
    with decomposed_composites(torch), attention_in_blocks(blocks, *orders):
        got = origin.loss_fn(origin.model, *batch)
    return bool(torch.allclose(got.double(), want.double(), rtol=1e-4, atol=1e-6))


def import_for_context(step, mesh: Mesh, tactics: Sequence) -> tuple:
    """What `slicer.compile` partitions for `tactics` with a `ContextParallel` among them: `step` imported again
    with ring attention over the devices of its axes on `mesh` (its sequence the inputs the tactics tile over
    them; method "ring"), or as it is with its attention's inputs read tiled by heads and its outputs by the
    sequence ("all_to_all"), and the other tactics (CompileError for an axis the mesh lacks or a step given as
    text); without one, `step` and `tactics` as they are."""
    context = next((t for t in tactics if isinstance(t, ContextParallel)), None)
    if context is None:
        return step, tuple(tactics)
    blocks = 1
    for axis in context.axes:
        if not mesh.has_axis(axis):
            raise CompileError(f"{context}: the mesh {mesh} has no axis '{axis}'")
        blocks *= mesh.size(axis)
    if not isinstance(step, ImportedProgram):
        raise CompileError(f"{context}: give the imported program itself (slicer.training_step, "
                           "slicer.from_torch), not its text")
    others = tuple(t for t in tactics if not isinstance(t, ContextParallel))
    if context.method != "ring":  # Ulysses: the program as it is, its attention read by heads (context_heads.py)
        return heads_around_attention(step, mesh, context.axes, others, str(context)), others
    names = step.input_names
    sequence = {names[t.arg] if isinstance(t.arg, int) and t.arg < len(names) else str(t.arg): t.dim
                for t in tactics if isinstance(t, Tile) and t.arg is not None and _axes(t.axes) == context.axes}
    return import_in_blocks(step, blocks, sequence), others


def _axes(axes) -> tuple[str, ...]:
    return (axes,) if isinstance(axes, str) else tuple(axes)


__all__ = ["import_for_context", "import_in_blocks"]
