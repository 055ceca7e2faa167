"""Compile a `func.func` on tensors to native code and call it with numpy arrays.

The single-process executable semantics every correctness test relies on: any
program at any stage of partitioning (global, with slicer loops, or SPMD local
code without collectives) can be run here and compared with numpy.

How: the module is re-parsed into a fresh context (the caller's IR is never
mutated), slicer loops are lowered with `slicer-lower-to-loops`, then upstream
passes bufferize (function boundaries included, results turned into out
parameters so numpy owns every output buffer), free temporaries, lower to LLVM,
and the ExecutionEngine (which targets the host CPU) compiles it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
from mlir import ir
from mlir.execution_engine import ExecutionEngine
from mlir.runtime import get_ranked_memref_descriptor

from slicer.dialect import MESH, make_context, walk_ops
from slicer.passes.pipeline import run_pipeline
from slicer.toolchain import runner_utils_libraries

# Bufferize with numpy-owned outputs, then lower everything to the LLVM dialect.
LOWERING_PIPELINE = ",".join(
    [
        # arith/math on tensors are elementwise: make them linalg.generic so they bufferize.
        "func.func(convert-elementwise-to-linalg)",
        "one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}",
        "buffer-results-to-out-params{hoist-static-allocs=true modify-public-functions=true}",
        "buffer-deallocation-pipeline",
        "func.func(convert-linalg-to-loops)",
        "expand-strided-metadata",
        "lower-affine",
        "convert-scf-to-cf",
        # math.erf and others without an LLVM intrinsic become libm calls (the process has libm).
        "convert-math-to-llvm",
        "convert-math-to-libm",
        "convert-to-llvm",
        "reconcile-unrealized-casts",
    ]
)

# MLIR element type -> numpy dtype: the one table the JIT, the AOT kernels and the runtime share.
NUMPY_DTYPES = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
}


class JitError(RuntimeError):
    """The function cannot be compiled or called as asked (says what to change)."""


@dataclass(frozen=True)
class TensorSpec:
    """Shape and numpy dtype of one function argument or result."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @staticmethod
    def of(type_: ir.Type, what: str) -> "TensorSpec":
        if not isinstance(type_, ir.RankedTensorType) or not type_.has_static_shape:
            raise JitError(f"{what} has type {type_}; the JIT takes statically shaped tensors only")
        name = str(type_.element_type)
        if name not in NUMPY_DTYPES:
            raise JitError(f"{what} has element type {name}; supported: {', '.join(NUMPY_DTYPES)}")
        return TensorSpec(tuple(type_.shape), np.dtype(NUMPY_DTYPES[name]))


class CompiledFunction:
    """A natively compiled function: call it with numpy arrays, get numpy arrays back."""

    def __init__(self, module_text: str, entry: str | None = None, *, opt_level: int = 3):
        self._context = make_context()
        with self._context, ir.Location.unknown():
            module = ir.Module.parse(module_text)
            run_pipeline(module, "slicer-lower-to-loops")
            for op in walk_ops(module, MESH):
                op.erase()
            func = _find_function(module, entry)
            self.name = ir.StringAttr(func.attributes["sym_name"]).value
            fn_type = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
            self.inputs = [TensorSpec.of(t, f"argument #{i} of @{self.name}") for i, t in enumerate(fn_type.inputs)]
            self.outputs = [TensorSpec.of(t, f"result #{i} of @{self.name}") for i, t in enumerate(fn_type.results)]
            func.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
            # Arguments are read-only: bufferization copies before writing into them.
            read_only = ir.DictAttr.get({"bufferization.writable": ir.BoolAttr.get(False)})
            func.attributes["arg_attrs"] = ir.ArrayAttr.get([read_only] * len(self.inputs))
            run_pipeline(module, LOWERING_PIPELINE)
            # The engine owns the compiled code: keep it alive as long as this object.
            self._engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=runner_utils_libraries())

    def __call__(self, *arrays: np.ndarray):
        if len(arrays) != len(self.inputs):
            raise JitError(f"@{self.name} takes {len(self.inputs)} arrays, got {len(arrays)}")
        args = []
        for index, (array, spec) in enumerate(zip(arrays, self.inputs)):
            array = np.asarray(array)
            if array.shape != spec.shape or array.dtype != spec.dtype:
                raise JitError(
                    f"argument #{index} of @{self.name} must be {spec.dtype}{list(spec.shape)}, "
                    f"got {array.dtype}{list(array.shape)}"
                )
            args.append(np.require(array, requirements="C"))  # ascontiguousarray would make 0-d arrays 1-d
        outputs = [np.empty(spec.shape, spec.dtype) for spec in self.outputs]
        descriptors = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in args + outputs]
        self._engine.invoke(self.name, *descriptors)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _find_function(module: ir.Module, entry: str | None) -> ir.Operation:
    functions = [op.operation for op in module.body.operations if op.operation.name == "func.func"]
    defined = [f for f in functions if len(f.regions[0].blocks)]
    if entry is not None:
        for f in defined:
            if ir.StringAttr(f.attributes["sym_name"]).value == entry:
                return f
        names = ", ".join("@" + ir.StringAttr(f.attributes["sym_name"]).value for f in defined) or "none"
        raise JitError(f"no function @{entry} in the module (functions: {names})")
    public = [f for f in defined if "sym_visibility" not in f.attributes or ir.StringAttr(f.attributes["sym_visibility"]).value == "public"]
    if len(public) != 1:
        raise JitError(f"the module has {len(public)} public functions; name the one to run with entry=")
    return public[0]


def compile_function(module: ir.Module | ir.Operation | str, entry: str | None = None, *, opt_level: int = 3) -> CompiledFunction:
    """Compile `entry` (default: the single public function) of `module` for this CPU."""
    return CompiledFunction(module if isinstance(module, str) else str(module), entry, opt_level=opt_level)


def run(module: ir.Module | ir.Operation | str, *arrays: np.ndarray, entry: str | None = None):
    """Compile and call once: `run(module, a, b)` -> numpy array (tuple if several results)."""
    return compile_function(module, entry)(*arrays)
