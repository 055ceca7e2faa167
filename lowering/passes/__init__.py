"""The passes of the lowering stage: one thin file per pass, named like its lit test
(`test/Transforms/<pass-name>.mlir`), each a frozen dataclass whose fields are its typed options and whose
`apply` calls into its stage (`slicer.lowering`).

They live here, in the lowering layer, and not in `slicer.passes` (layer 10) with the other passes' thin
files, because the kernel pipeline (`kernel_pipeline.py`) runs them by name, and it runs below
`slicer.passes`: in the runtime's ranks, the JIT and the checking oracle, none of which may import the
passes layer. Every class registers itself in the one registry, `slicer.core.passes.PASSES`, when its
module is imported: `LOWERING_PASSES` (a `PassTable`) imports a pass's module when the pass is first looked
up, so a tool running one step loads that step only. `slicer.passes.PASSES` includes this table, so every
pass is known wherever pipelines are written by users.

Adding a kernel step: its implementation in the lowering module it belongs to (a function over a module),
one thin file here named like the pass (`slicer-kernel-rows`: `kernel_rows.py`) registered with
`@register_pass`, its name below, one lit test, and its element in a stage of `kernel_pipeline.py`.
"""

from __future__ import annotations

from slicer.core.passes import PassTable

LOWERING_PASSES = PassTable(__name__, (
    "slicer-lower-to-loops", "slicer-kernel-clamp-gathers", "slicer-kernel-distinct-results", "slicer-kernel-widen-i1",
    "slicer-kernel-widen-narrow-floats", "slicer-kernel-fold-widenings", "slicer-kernel-im2col", "slicer-kernel-onehot",
    "slicer-kernel-contract", "slicer-kernel-rows", "slicer-kernel-vectorize", "slicer-kernel-reject-narrow-memrefs",
    "slicer-kernel-checked-asserts", "slicer-kernel-narrow-moves", "slicer-kernel-expand-bf16",
))
"""The passes of this layer, in the order the default kernel pipeline first runs them (each module imported
when its pass is first looked up)."""

__all__ = ["LOWERING_PASSES"]
