"""`slicer-kernel-distinct-results`: every result of a kernel gets its own buffer.

After elementwise fusion and CSE two results of a function can become the same SSA value (`-(-(-x))` and
`-x`), or a result can be an argument returned unchanged. Results become out-params the caller allocates
(`buffer-results-to-out-params`), and MLIR 22's implementation of that pass crashes (a segfault in
`updateReturnOps`) when one buffer is returned twice. This step makes each returned value distinct by
copying repeats (and arguments) into fresh tensors with `linalg.copy` before bufferization, which then
writes each copy straight into its own out-param.

Distinct tensors can still share a buffer once bufferized: a result whose contents are undefined (a slice of a
`tensor.empty`) and a result computed in place into it become one `memref.alloc` returned twice (a fuzzer
case with uneven blocks crashed the process that way). So the pipeline runs this step again right after
`one-shot-bufferize`, where it copies repeated (and argument) memrefs into fresh allocations (`memref.copy`).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func as func_d
from mlir.dialects import linalg, memref, tensor

from slicer.core.functions import defined_functions


def distinct_results(module: ir.Module) -> None:
    """Copy every returned tensor or buffer that is returned more than once, or is a function argument."""
    for func in defined_functions(module):
        for block in func.regions[0].blocks:
            term = block.operations[len(block.operations) - 1].operation
            if term.name != func_d.ReturnOp.OPERATION_NAME:
                continue
            seen: set = set()
            for index, value in enumerate(list(term.operands)):
                if value in seen or isinstance(value, ir.BlockArgument):
                    copy = _fresh_copy(value, term)
                    if copy is not None:
                        term.operands[index] = copy
                seen.add(value)


def _fresh_copy(value: ir.Value, before: ir.Operation) -> ir.Value | None:
    """`value` copied into a fresh tensor or (static-shaped, identity-layout) buffer, or None for other types."""
    with ir.InsertionPoint(before), before.location:
        if isinstance(value.type, ir.RankedTensorType):
            t = ir.RankedTensorType(value.type)
            return linalg.copy(value, outs=[tensor.empty(t.shape, t.element_type)])
        if isinstance(value.type, ir.MemRefType):
            m = ir.MemRefType(value.type)
            if not m.has_static_shape or not _identity_layout(m):
                return None
            fresh = memref.alloc(m, [], [])
            memref.copy(value, fresh)
            return fresh
    return None


def _identity_layout(m: ir.MemRefType) -> bool:
    """Whether `m` is laid out row-major without offset (what the function boundaries of the kernels use)."""
    layout = m.layout
    if not isinstance(layout, ir.AffineMapAttr):
        return False
    amap = layout.value
    return amap == ir.AffineMap.get_identity(amap.n_dims, amap.context)
