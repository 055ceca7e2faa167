"""`slicer-kernel-distinct-results`: every result of a kernel gets its own buffer.

After elementwise fusion and CSE two results of a function can become the same SSA value (`-(-(-x))` and
`-x`), or a result can be an argument returned unchanged. Results become out-params the caller allocates
(`buffer-results-to-out-params`), and MLIR 22's implementation of that pass crashes (a segfault in
`updateReturnOps`) when one buffer is returned twice. This step makes each returned value distinct by
copying repeats (and arguments) into fresh tensors with `linalg.copy` before bufferization, which then
writes each copy straight into its own out-param.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import func as func_d
from mlir.dialects import linalg, tensor

from slicer.core.functions import defined_functions


def distinct_results(module: ir.Module) -> None:
    """Copy every returned value that is returned more than once, or is a function argument."""
    for func in defined_functions(module):
        for block in func.regions[0].blocks:
            term = block.operations[len(block.operations) - 1].operation
            if term.name != func_d.ReturnOp.OPERATION_NAME:
                continue
            seen: set = set()
            for index, value in enumerate(list(term.operands)):
                is_argument = isinstance(value, ir.BlockArgument)
                if (value in seen or is_argument) and isinstance(value.type, ir.RankedTensorType):
                    with ir.InsertionPoint(term), term.location:
                        t = ir.RankedTensorType(value.type)
                        empty = tensor.empty(t.shape, t.element_type)
                        term.operands[index] = linalg.copy(value, outs=[empty])
                seen.add(value)
