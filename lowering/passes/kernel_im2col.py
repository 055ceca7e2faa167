"""`slicer-kernel-im2col`: bufferized convolutions (contractions reading an input through sums of loop dims,
`oh * s + kh`) rewritten into a patch copy and a plain contraction that `slicer-kernel-contract` turns into a
packed GEMM (`slicer.lowering.contract.im2col`). Runs on bufferized kernels, before `slicer-kernel-contract`."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from mlir import ir
from mlir.dialects import linalg

from slicer.core.errors import NotAContraction
from slicer.core.operations import walk_ops
from slicer.core.passes import ModulePass, register_pass

from ..contract.im2col import rewrite
from ..emitter import GeneratedFunctions

log = logging.getLogger("slicer.kernels")


@register_pass
@dataclass(frozen=True)
class SlicerKernelIm2col(ModulePass):
    name = "slicer-kernel-im2col"
    description = ("Rewrite every bufferized convolution (a contraction reading an input through sums of loop "
                   "dims) into an im2col patch copy and a contraction over projections")

    def apply(self, module: ir.Operation) -> None:
        functions = GeneratedFunctions("__slicer_im2col_")
        for op in walk_ops(module.opview, linalg.GenericOp.OPERATION_NAME):
            try:
                rewrite(op, functions)
            except NotAContraction as why:
                log.debug("convolution not rewritten (%s): %s", why, op.location)
        texts = functions.texts()
        if texts:
            generated = ir.Module.parse("\n".join(texts), module.context)
            for fn in list(generated.body.operations):
                module.opview.body.append(fn.operation)
