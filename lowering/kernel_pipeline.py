"""The kernel compilation pipeline, as data: named stages of pass-pipeline elements.

A pipeline is a tuple of `(stage, (element, ...))` like Catalyst's pass
pipelines, so callers can print it, hash it (the kernel cache key includes
`KernelPipeline.text()`), drop or replace a stage, or run it up to a stage to
inspect the IR. Every element is a pass-pipeline element: an upstream MLIR pass
(or nested pipeline), or a Slicer pass registered in the one registry
(`slicer.core.passes.PASSES`) that `slicer-opt` and `slicer.passes.run_pipeline`
use too, so each step runs alone as `slicer-opt -p 'slicer-kernel-rows{unroll=2}'`
and has its lit test in `test/Transforms/<pass-name>.mlir`. The lowering's
passes are thin classes in `slicer.lowering.passes` (`LOWERING_PASSES`, each
imported when a pipeline first names it), one file per pass (listed in
docs/module-notes.md, `lowering/kernel_pipeline.py` and docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir

from slicer.core.errors import PipelineError
from slicer.core.pipeline import instantiate, parse_element, run_pipeline

from .passes import LOWERING_PASSES

Stage = tuple[str, tuple[str, ...]]

LIBRARY_ALLOCATOR = "finalize-memref-to-llvm{use-generic-functions=true}"
"""How AOT libraries allocate: through their own allocator (workspace.py); the JIT uses malloc instead."""

_PRELUDE: Stage = ("slicer", ("slicer-lower-to-loops",))
_LINALG: Stage = (
    "linalg",
    (
        # Gathers read within bounds whatever the data, so a failed index check is reported (asserts.py).
        "slicer-kernel-clamp-gathers",
        # arith/math on tensors are elementwise: make them linalg.generic so they fuse and bufferize.
        "func.func(convert-elementwise-to-linalg)",
        # bf16/f16 ops compute in f32 and round each result once, before fusion fuses the rounding into its
        # consumers (see narrow_floats.py); nothing changes in a module without narrow floats.
        "slicer-kernel-widen-narrow-floats",
        # One generic per elementwise chain: chains run at memory bandwidth, so fewer passes pay.
        "linalg-fuse-elementwise-ops",
        # A widening read by several ops (fusion takes one-reader producers only) is folded into each reader,
        # so a contraction reads its bf16 operand as it is (widenings.py).
        "slicer-kernel-fold-widenings",
        # x ** n with an integer n (torch's x ** 2 and its backward): LLVM's powi takes a scalar exponent only,
        # and a vectorized body would give it a vector; constant exponents become multiplications, others powf.
        "func.func(math-expand-ops{ops=fpowi})",
        "canonicalize",
        "cse",
        # Fusion and CSE can make two results one value: each gets its own buffer (see lowering/results.py).
        "slicer-kernel-distinct-results",
    ),
)
_BUFFERIZE: Stage = (
    "bufferize",
    (
        # Boolean tensors become byte tensors: no i1 buffer reaches the LLVM lowering (see widen_i1.py).
        "slicer-kernel-widen-i1",
        "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
        # Distinct tensors can bufferize to one buffer (an undefined slice and an op computed into it): again,
        # on buffers, before buffer-results-to-out-params sees one returned twice.
        "slicer-kernel-distinct-results",
        # Results become out-params: numpy allocates outputs, the kernel writes into them.
        "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true}",
        "canonicalize",
    ),
)
_VECTORIZE: Stage = (
    "vectorize",
    (
        # Named ops become linalg.generic so one classifier (iterator types) picks tile sizes.
        "func.func(linalg-generalize-named-ops)",
        # Convolutions become an im2col patch copy and a plain contraction (contract/im2col.py).
        "slicer-kernel-im2col",
        # A contraction with a one-hot factor (an embedding's gradient) adds only where the mask holds (onehot.py).
        "slicer-kernel-onehot",
        # Contractions become packed GEMMs around one register-tile micro-kernel (contract.py).
        "slicer-kernel-contract{mr=8 nv=2 mc=64 nc=1024 kc=256 unroll=4}",
        # Elementwise ops and reductions become vector loops, fused row by row (rows.py).
        "slicer-kernel-rows{unroll=4}",
        "slicer-kernel-vectorize{parallel=64 matmul=8,32,16 kc=256}",
        "canonicalize",
        "cse",
    ),
)
_TO_LLVM: Stage = (
    "llvm",
    (
        "slicer-kernel-reject-narrow-memrefs",
        "buffer-deallocation-pipeline",
        # Whatever the vectorizer left (dynamic remainder tiles, convolutions, ...) runs as loops.
        "func.func(convert-linalg-to-loops)",
        # cf.assert records a failure the caller raises, instead of aborting the process (asserts.py).
        "slicer-kernel-checked-asserts",
        "func.func(convert-vector-to-scf{full-unroll=true})",
        # Vector ops that only move bf16/f16 elements move i16 (LLVM aborts on odd-sized bf16 shuffles;
        # narrow_moves.py).
        "slicer-kernel-narrow-moves",
        "expand-strided-metadata",
        "lower-affine",
        "convert-scf-to-cf",
        # bf16 arithmetic left outside linalg ops (scalars read with tensor.extract) in f32 too: upstream's
        # per-instruction widening, so LLVM never promotes bf16 itself (its rounding is a __truncsfbf2 call).
        "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}",
        "math-extend-to-supported-types{target-type=f32}",
        # Roundings to bf16 as integer vector ops, not calls of __truncsfbf2 (see narrow_floats.py).
        "slicer-kernel-expand-bf16",
        # Math functions LLVM has no instruction or intrinsic for (erf, ...) become libm calls; the
        # generated kernels expand exp/tanh/erf/log into vector arith before this (vector_math.py).
        "convert-math-to-llvm",
        "convert-math-to-libm",
        # x86vector ops (vscalef in the generated exp, vdpbf16ps) only appear when the target has AVX-512, amx
        # ops (the bf16 GEMM's tiles) when it has AMX (lowering/contract/matrix_units.py).
        "convert-vector-to-llvm{enable-x86vector enable-amx}",
        # Allocations call the library's own allocator, which reuses large blocks (workspace.py).
        LIBRARY_ALLOCATOR,
        "convert-to-llvm",
        "reconcile-unrealized-casts",
    ),
)


@dataclass(frozen=True)
class KernelPipeline:
    """An ordered tuple of named stages; immutable, hashable, printable."""

    stages: tuple[Stage, ...]

    def text(self) -> str:
        """One line per stage, `stage: a,b,c`; the exact text the cache key hashes."""
        return "\n".join(f"{name}: {','.join(elements)}" for name, elements in self.stages)

    def names(self) -> list[str]:
        return [name for name, _ in self.stages]

    def without(self, *stage_names: str) -> KernelPipeline:
        """This pipeline minus the named stages (e.g. `without("vectorize")` for plain loops)."""
        unknown = set(stage_names) - set(self.names())
        if unknown:
            raise PipelineError(f"no stage {sorted(unknown)} in pipeline (stages: {', '.join(self.names())})")
        return replace(self, stages=tuple(s for s in self.stages if s[0] not in stage_names))

    def replacing(self, element: str, by: str) -> KernelPipeline:
        """This pipeline with `element` replaced by `by` wherever it appears (an error if it appears nowhere)."""
        if not any(element in elements for _, elements in self.stages):
            raise PipelineError(f"no element '{element}' in pipeline:\n{self.text()}")
        return replace(self, stages=tuple((name, tuple(by if e == element else e for e in elements))
                                          for name, elements in self.stages))

    def with_options(self, pass_name: str, **options) -> KernelPipeline:
        """This pipeline with options of the Slicer pass `pass_name` set (keyword names in snake_case, as the
        pass's fields): e.g. `DEFAULT_PIPELINE.with_options("slicer-kernel-contract", bf16_units="f32")`."""
        if pass_name not in LOWERING_PASSES:
            raise PipelineError(f"no Slicer pass '{pass_name}'")
        for _, elements in self.stages:
            for element in elements:
                parsed = parse_element(element)
                if parsed.name == pass_name:
                    updated = replace(instantiate(parsed, LOWERING_PASSES), **options).pipeline_text()
                    return self.replacing(element, updated)
        raise PipelineError(f"no element '{pass_name}' in pipeline:\n{self.text()}")

    def until(self, stage_name: str) -> KernelPipeline:
        """The stages up to and including `stage_name` (to inspect intermediate IR)."""
        if stage_name not in self.names():
            raise PipelineError(f"no stage '{stage_name}' in pipeline (stages: {', '.join(self.names())})")
        index = self.names().index(stage_name)
        return replace(self, stages=self.stages[: index + 1])

    def run(self, module: ir.Module) -> None:
        """Run every stage in order on `module` (in place, in its context)."""
        for _, elements in self.stages:
            _run_elements(module, elements)


def _run_elements(module: ir.Module, elements: tuple[str, ...]) -> None:
    # Consecutive upstream elements go to MLIR in one PassManager; the Slicer passes run in between.
    batch: list[str] = []
    for element in elements:
        parsed = parse_element(element)
        if parsed.name not in LOWERING_PASSES:
            batch.append(element)
            continue
        if batch:
            run_pipeline(module, ",".join(batch))
            batch = []
        instantiate(parsed, LOWERING_PASSES).apply(module.operation)
    if batch:
        run_pipeline(module, ",".join(batch))


# The default: fused, bufferized, tiled and vectorized, lowered to LLVM.
DEFAULT_PIPELINE = KernelPipeline((_PRELUDE, _LINALG, _BUFFERIZE, _VECTORIZE, _TO_LLVM))
# The same without tiling/vectorization: every linalg op becomes scalar loops (the reference).
LOOPS_PIPELINE = DEFAULT_PIPELINE.without("vectorize")
