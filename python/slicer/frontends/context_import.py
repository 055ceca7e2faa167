"""A training step imported again with its attention as ring attention over the blocks of a context-parallel
axis (`slicer.strategies.context_parallel`; `decomp_ring.py`).

The number of blocks is the number of devices the sequence is tiled over, known only once `slicer.compile` has
the mesh: it asks for the step again from what `training_step` imported it from (its `StepOrigin`), with
`F.scaled_dot_product_attention` traced in blocks. The arguments and results keep their names and order, so the
other tactics apply to the new step as they would to the first.
"""

from __future__ import annotations

from collections.abc import Sequence

from slicer.core.errors import CompileError, FrontendError
from slicer.core.mesh import Mesh
from slicer.tactics.context_tactic import ContextParallel

from .composites import attention_in_blocks
from .context_heads import heads_around_attention
from .program import ImportedProgram
from .stages import StepOrigin
from .training import training_step


def import_in_blocks(step: ImportedProgram, blocks: int) -> ImportedProgram:
    """`step` imported again with ring attention over `blocks` blocks of the sequence (module docstring)."""
    origin = step.origin
    if not isinstance(origin, StepOrigin):
        raise FrontendError("context parallelism imports the step again with its attention in blocks: give a step "
                            "imported with slicer.training_step (a program from slicer.from_torch or text cannot "
                            f"be imported again), got {step.source}")
    with attention_in_blocks(blocks):
        return training_step(origin.model, origin.loss_fn, *origin.batch, optimizer=origin.optimizer,
                             seed=origin.seed, microbatches=origin.microbatches, precision=origin.precision)


def import_for_context(step, mesh: Mesh, tactics: Sequence) -> tuple:
    """What `slicer.compile` partitions for `tactics` with a `ContextParallel` among them: `step` imported again
    with ring attention over the devices of its axes on `mesh` (method "ring"), or with its attention's inputs
    read tiled by heads and its outputs by the sequence ("all_to_all"), and the other tactics (CompileError for an axis
    the mesh lacks or a step given as text); without one, `step` and `tactics` as they are."""
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
    if context.method == "ring":
        return import_in_blocks(step, blocks), others
    # Ulysses: the program as it is, its attention read by heads (context_heads.py)
    return heads_around_attention(step, mesh, context.axes, others, str(context)), others


__all__ = ["import_for_context", "import_in_blocks"]
