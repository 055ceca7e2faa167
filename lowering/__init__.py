"""From SPMD functions to native code (docs/kernels.md; layer 8 of docs/architecture.md): slicer loops
lowered to upstream loops, the kernel graph, the kernel pipeline, cached AOT kernels and the JIT."""

from slicer.core.errors import JitError, KernelError, KernelGraphError

from .aot import TOOL_RUNS, Target, compile_kernel, compile_kernels, compile_library, library_key
from .cache import CacheStats, KernelCache, cache_stats, default_cache_dir, reset_cache_stats
from .jit import CompiledFunction, compile_function, compile_functions, run
from .kernel import ArraySpec, BoundCall, Kernel, KernelLibrary, aligned_empty
from .kernel_graph import CollectiveNode, KernelGraph, KernelNode
from .kernel_pipeline import DEFAULT_PIPELINE, LOOPS_PIPELINE, KernelPipeline
from .loops import lower_loops

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
