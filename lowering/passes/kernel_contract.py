"""`slicer-kernel-contract`: contractions as packed GEMMs around one register-tile micro-kernel
(`slicer.lowering.contract`). Runs on bufferized kernels; its options are `ContractOptions`' fields (register
tile `mr` x `nv` vectors, cache blocks `mc`, `nc`, `kc`, k unroll `unroll`, the units of bf16 contractions
`bf16-units`: auto, amx, avx512bf16 or f32)."""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core.passes import ModulePass, register_pass

from ..contract import ContractOptions, contract_module


@register_pass
@dataclass(frozen=True)
class SlicerKernelContract(ModulePass, ContractOptions):
    name = "slicer-kernel-contract"
    dependent_dialects = ("amx",)  # the generated bf16 micro-kernel may hold AMX tile ops
    description = ("Replace every bufferized contraction (linalg.generic computing out + a * b) by a call to a "
                   "generated packed GEMM")

    def apply(self, module: ir.Operation) -> None:
        contract_module(module.opview, self)
