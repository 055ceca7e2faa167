"""The kernel compilation pipeline, as data: named stages of pass-pipeline elements.

A pipeline is a tuple of `(stage, (element, ...))` like Catalyst's pass
pipelines, so callers can print it, hash it (the kernel cache key includes
`KernelPipeline.text()`), drop or replace a stage, or run it up to a stage to
inspect the IR. Elements are upstream/slicer pass-pipeline elements run with
`slicer.core.pipeline.run_pipeline`, except the Python steps of this layer
(`PYTHON_STEPS`; not registered passes because they only make sense inside
this pipeline, and `slicer-lower-to-loops`, the same function as the pass):

- `slicer-kernel-vectorize{...}`: tile and vectorize every linalg op with a
  transform-dialect script generated per op (see `lowering/vectorize.py`);
- `slicer-kernel-widen-i1`: boolean tensors stored as bytes (`widen_i1.py`), so
  masks cross kernels and are arguments;
- `slicer-kernel-reject-narrow-memrefs`: a clear error instead of an assertion
  failure in the LLVM lowering for any sub-byte buffer left;
- `slicer-kernel-clamp-gathers`, `slicer-kernel-checked-asserts`: a program's
  failed `cf.assert` is an error the caller raises, not an abort (`asserts.py`).

Input: a module of `func.func` on statically shaped tensors (linalg, arith,
math, tensor, slicer loops). Output: LLVM dialect where every public function
takes its inputs then its outputs as memrefs (results became out-params so the
caller owns every output buffer) and has a `_mlir_ciface_` C interface.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mlir import ir

from slicer.core.errors import KernelError
from slicer.core.pipeline import parse_element, parse_options, run_pipeline

from .asserts import checked_asserts, clamp_gathers
from .contract import ContractOptions, contract_module
from .loops import lower_loops
from .results import distinct_results
from .rows import RowsOptions, rows_module
from .vectorize import VectorizeOptions, vectorize_module
from .widen_i1 import widen_i1

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
        # One generic per elementwise chain: chains run at memory bandwidth, so fewer passes pay.
        "linalg-fuse-elementwise-ops",
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
        "expand-strided-metadata",
        "lower-affine",
        "convert-scf-to-cf",
        # Math functions LLVM has no instruction or intrinsic for (erf, ...) become libm calls; the
        # generated kernels expand exp/tanh/erf/log into vector arith before this (vector_math.py).
        "convert-math-to-llvm",
        "convert-math-to-libm",
        # x86vector ops (vscalef in the generated exp) only appear when the target has AVX-512.
        "convert-vector-to-llvm{enable-x86vector}",
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

    def without(self, *stage_names: str) -> "KernelPipeline":
        """This pipeline minus the named stages (e.g. `without("vectorize")` for plain loops)."""
        unknown = set(stage_names) - set(self.names())
        if unknown:
            raise ValueError(f"no stage {sorted(unknown)} in pipeline (stages: {', '.join(self.names())})")
        return replace(self, stages=tuple(s for s in self.stages if s[0] not in stage_names))

    def replacing(self, element: str, by: str) -> "KernelPipeline":
        """This pipeline with `element` replaced by `by` wherever it appears (an error if it appears nowhere)."""
        if not any(element in elements for _, elements in self.stages):
            raise ValueError(f"no element '{element}' in pipeline:\n{self.text()}")
        return replace(self, stages=tuple((name, tuple(by if e == element else e for e in elements))
                                          for name, elements in self.stages))

    def until(self, stage_name: str) -> "KernelPipeline":
        """The stages up to and including `stage_name` (to inspect intermediate IR)."""
        if stage_name not in self.names():
            raise ValueError(f"no stage '{stage_name}' in pipeline (stages: {', '.join(self.names())})")
        index = self.names().index(stage_name)
        return replace(self, stages=self.stages[: index + 1])

    def run(self, module: ir.Module) -> None:
        """Run every stage in order on `module` (in place, in its context)."""
        for _, elements in self.stages:
            _run_elements(module, elements)


def _run_elements(module: ir.Module, elements: tuple[str, ...]) -> None:
    # Consecutive pass elements go to MLIR in one PassManager; the Python steps run in between.
    batch: list[str] = []
    for element in elements:
        if parse_element(element).name in PYTHON_STEPS:
            if batch:
                run_pipeline(module, ",".join(batch))
                batch = []
            _run_kernel_step(module, element)
        else:
            batch.append(element)
    if batch:
        run_pipeline(module, ",".join(batch))


def _run_kernel_step(module: ir.Module, element: str) -> None:
    parsed = parse_element(element)
    PYTHON_STEPS[parsed.name](module, parse_options(parsed.options))


class NarrowMemRefError(KernelError):
    """A buffer of sub-byte elements (i1) that the LLVM lowering cannot store."""


def reject_narrow_memrefs(module: ir.Module) -> None:
    """Raise on any memref of i1 (or narrower-than-byte) elements left after bufferization.

    MLIR 22's memref-to-LLVM lowering *asserts* (aborting the process) on loads/stores of sub-byte
    elements; an error naming the value is better than a crash. Boolean tensors fused into one
    linalg.generic never become buffers, so `select(cmp(a, b), a, b)` chains are fine.
    """
    found: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        for value in list(op.results) + [a for r in op.regions for b in r.blocks for a in b.arguments]:
            element = getattr(value.type, "element_type", None)
            if isinstance(value.type, ir.MemRefType) and isinstance(element, ir.IntegerType) and element.width < 8:
                found.append(f"{value.type} at {op.location}")
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if found:
        raise NarrowMemRefError(
            f"buffers of i1 elements ({found[0]}{' and more' if len(found) > 1 else ''}) cannot be lowered: "
            "MLIR 22 cannot store sub-byte memref elements; keep booleans inside one elementwise chain, "
            "or convert them to i8 (arith.extui) before they are returned or stored"
        )


PYTHON_STEPS = {
    "slicer-lower-to-loops": lambda module, options: lower_loops(module.operation),
    "slicer-kernel-contract": lambda module, options: contract_module(module, ContractOptions(**{k: int(v) for k, v in options.items()})),
    "slicer-kernel-rows": lambda module, options: rows_module(module, RowsOptions(**{k: int(v) for k, v in options.items()})),
    "slicer-kernel-vectorize": lambda module, options: vectorize_module(module, VectorizeOptions.parse(options)),
    "slicer-kernel-reject-narrow-memrefs": lambda module, options: reject_narrow_memrefs(module),
    "slicer-kernel-distinct-results": lambda module, options: distinct_results(module),
    "slicer-kernel-widen-i1": lambda module, options: widen_i1(module),
    "slicer-kernel-clamp-gathers": lambda module, options: clamp_gathers(module),
    "slicer-kernel-checked-asserts": lambda module, options: checked_asserts(module),
}
"""The pipeline elements implemented in Python here, by name: `(module, options) -> None`."""

# The default: fused, bufferized, tiled and vectorized, lowered to LLVM.
DEFAULT_PIPELINE = KernelPipeline((_PRELUDE, _LINALG, _BUFFERIZE, _VECTORIZE, _TO_LLVM))
# The same without tiling/vectorization: every linalg op becomes scalar loops (the reference).
LOOPS_PIPELINE = DEFAULT_PIPELINE.without("vectorize")
