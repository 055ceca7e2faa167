"""From SPMD functions to native code: the JIT, the kernel pipeline and cached AOT kernels."""

from .aot import TOOL_RUNS, Target, compile_kernel, compile_library, library_key
from .cache import CacheStats, KernelCache, cache_stats, default_cache_dir, reset_cache_stats
from .jit import CompiledFunction, JitError, compile_function, run
from .kernel import ArraySpec, BoundCall, Kernel, KernelError, KernelLibrary, aligned_empty
from .kernel_pipeline import DEFAULT_PIPELINE, LOOPS_PIPELINE, KernelPipeline

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
    "KernelLibrary",
    "KernelPipeline",
    "LOOPS_PIPELINE",
    "TOOL_RUNS",
    "Target",
    "aligned_empty",
    "cache_stats",
    "compile_function",
    "compile_kernel",
    "compile_library",
    "default_cache_dir",
    "library_key",
    "reset_cache_stats",
    "run",
]
