"""The passes of the lowering stage: one thin file per pass, named like its lit test
(`test/Transforms/<pass-name>.mlir`), each a frozen dataclass whose fields are its typed options and whose
`apply` calls into its stage (`slicer.lowering`).

They live here, in the lowering layer, and not in `slicer.passes` (layer 10) with the other passes' thin
files, because the kernel pipeline (`kernel_pipeline.py`) runs them by name, and it runs below
`slicer.passes`: in the runtime's ranks, the JIT and the checking oracle, none of which may import the
passes layer. Every class registers itself in the one registry, `slicer.core.passes.PASSES`, which
`slicer-opt`, `slicer.passes.run_pipeline` and the kernel pipeline all use; `slicer.passes` imports this
package, so every pass is known wherever pipelines are written by users.

Adding a kernel step: its implementation in the lowering module it belongs to (a function over a module),
one thin file here registered with `@register_pass`, one import below, one lit test, and its element in a
stage of `kernel_pipeline.py`.
"""

from __future__ import annotations

from .kernel_checked_asserts import SlicerKernelCheckedAsserts
from .kernel_clamp_gathers import SlicerKernelClampGathers
from .kernel_contract import SlicerKernelContract
from .kernel_distinct_results import SlicerKernelDistinctResults
from .kernel_expand_bf16 import SlicerKernelExpandBf16
from .kernel_fold_widenings import SlicerKernelFoldWidenings
from .kernel_im2col import SlicerKernelIm2col
from .kernel_narrow_moves import SlicerKernelNarrowMoves
from .kernel_onehot import SlicerKernelOneHot
from .kernel_reject_narrow_memrefs import SlicerKernelRejectNarrowMemrefs
from .kernel_rows import SlicerKernelRows
from .kernel_vectorize import SlicerKernelVectorize
from .kernel_widen_i1 import SlicerKernelWidenI1
from .kernel_widen_narrow_floats import SlicerKernelWidenNarrowFloats
from .lower_to_loops import SlicerLowerToLoops

LOWERING_PASSES = (SlicerLowerToLoops, SlicerKernelClampGathers, SlicerKernelDistinctResults, SlicerKernelWidenI1,
                   SlicerKernelWidenNarrowFloats, SlicerKernelFoldWidenings, SlicerKernelIm2col, SlicerKernelOneHot,
                   SlicerKernelContract,
                   SlicerKernelRows, SlicerKernelVectorize, SlicerKernelRejectNarrowMemrefs, SlicerKernelCheckedAsserts,
                   SlicerKernelNarrowMoves, SlicerKernelExpandBf16)
"""The passes of this layer, in the order the default kernel pipeline first runs them."""

__all__ = ["LOWERING_PASSES", *(cls.__name__ for cls in LOWERING_PASSES)]
