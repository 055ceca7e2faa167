"""From SPMD functions to native code: the JIT now; kernel extraction and AOT later."""

from .jit import CompiledFunction, JitError, compile_function, run

__all__ = ["CompiledFunction", "JitError", "compile_function", "run"]
