"""From SPMD functions to native code (docs/kernels.md; layer 8 of docs/architecture.md): slicer loops
lowered to upstream loops, the kernel graph, the kernel pipeline, cached AOT kernels and the JIT.

The names are loaded when first read (PEP 562, `slicer.core.lazy`): an MPI rank that reads a kernel graph and
loads its compiled kernels (`KernelGraph`, `KernelLibrary`, the cache) imports neither the MLIR bindings nor
the kernel pipeline; only building a graph or compiling kernels does.
"""

from typing import TYPE_CHECKING

from slicer.core.errors import JitError, KernelError, KernelGraphError
from slicer.core.lazy import lazy_exports

if TYPE_CHECKING:  # the lazy names for type checkers (PEP 562 hides them); nothing is imported at run time
    from .aot import TOOL_RUNS, Target, compile_kernel, compile_kernels, compile_library, library_key
    from .cache import CacheStats, KernelCache, cache_stats, default_cache_dir, reset_cache_stats
    from .graph_builder import build_kernel_graph
    from .jit import CompiledFunction, compile_function, compile_functions, run
    from .kernel import ArraySpec, BoundCall, Kernel, KernelLibrary, aligned_empty
    from .kernel_graph import CollectiveNode, KernelGraph, KernelNode
    from .kernel_pipeline import DEFAULT_PIPELINE, LOOPS_PIPELINE, KernelPipeline
    from .loops import lower_loops

_EXPORTS = {
    **{name: ".aot" for name in ("TOOL_RUNS", "compile_kernel", "compile_kernels", "compile_library")},
    **{name: ".target" for name in ("Target", "library_key")},
    **{name: ".cache" for name in ("CacheStats", "KernelCache", "cache_stats", "default_cache_dir",
                                   "reset_cache_stats")},
    **{name: ".jit" for name in ("CompiledFunction", "compile_function", "compile_functions", "run")},
    **{name: ".kernel" for name in ("ArraySpec", "BoundCall", "Kernel", "KernelLibrary", "aligned_empty")},
    **{name: ".kernel_graph" for name in ("CollectiveNode", "KernelGraph", "KernelNode")},
    "build_kernel_graph": ".graph_builder",
    **{name: ".kernel_pipeline" for name in ("DEFAULT_PIPELINE", "LOOPS_PIPELINE", "KernelPipeline")},
    "lower_loops": ".loops",
}

__all__ = [
    "ArraySpec",
    "BoundCall",
    "CacheStats",
    "CompiledFunction",
    "DEFAULT_PIPELINE",
    "JitError",
    "Kernel",
    "KernelCache",
    "KernelError",
    "KernelGraph",
    "KernelGraphError",
    "KernelNode",
    "CollectiveNode",
    "KernelLibrary",
    "KernelPipeline",
    "LOOPS_PIPELINE",
    "TOOL_RUNS",
    "Target",
    "aligned_empty",
    "build_kernel_graph",
    "cache_stats",
    "compile_function",
    "compile_functions",
    "compile_kernel",
    "compile_kernels",
    "compile_library",
    "default_cache_dir",
    "library_key",
    "lower_loops",
    "reset_cache_stats",
    "run",
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
