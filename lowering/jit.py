"""Compile a `func.func` on tensors to native code and call it with numpy arrays.

The single-process executable semantics every correctness test relies on: any
program at any stage of partitioning (global, with slicer loops, or SPMD local
code without collectives) can be run here and compared with numpy.

How: the module is re-parsed into a fresh context (the caller's IR is never
mutated), slicer loops are lowered (`lowering.loops`), the entry function gets
the kernels' calling convention (`kernel_prepare.prepare_kernels`, as the AOT kernels
do), then the kernel pipeline without its vectorize stage (`JIT_PIPELINE`)
bufferizes (results become out parameters so numpy owns every output buffer)
and lowers to LLVM as scalar loops, and the ExecutionEngine (which targets the
host CPU) compiles it. Where this process's LLVM cannot generate code (torch-mlir imported before Slicer's MLIR:
`foreign_llvm.py`), the same scalar loops (`LOOPS_PIPELINE`) are built by the LLVM tools as an AOT kernel.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
from mlir import ir
from mlir.dialects import arith, scf
from mlir.execution_engine import ExecutionEngine

from slicer.core.errors import EntryError, JitError, KernelError
from slicer.core.functions import entry_function
from slicer.core.linalg_facts import is_linalg_op, loop_sizes
from slicer.core.names import USES_AMX_ATTR, VALUE_ATTR
from slicer.core.progress import Progress
from slicer.core.toolchain import runner_utils_libraries
from slicer.dialect import make_context, walk_ops

from .amx_permission import request_amx
from .aot import compile_kernel
from .asserts import take_messages
from .foreign_llvm import foreign_llvm_tables
from .kernel import STATUS_FUNCTION, check_failed
from .kernel_pipeline import LIBRARY_ALLOCATOR, LOOPS_PIPELINE
from .kernel_prepare import prepare_kernels
from .loops import lower_loops

JIT_ALLOCATOR = "finalize-memref-to-llvm"
"""How JIT-compiled functions allocate: malloc (the ExecutionEngine links no allocator of its own)."""
JIT_PIPELINE = LOOPS_PIPELINE.without("slicer").replacing(LIBRARY_ALLOCATOR, JIT_ALLOCATOR)
"""The kernel pipeline without tiling and vectorization (scalar loops: the reference), after the slicer
loops are lowered and the meshes dropped; memory comes from malloc (the ExecutionEngine links no allocator)."""


JIT_OPT_LEVEL = 2
"""LLVM's optimisation level for the JIT. -O2, not -O3: the reference's scalar loops run as fast and compile
in less time, which is most of what the simulator, `--check-each-step` and the tests spend. Results are the
same at every level: without fast-math flags LLVM neither reassociates nor contracts floating-point ops."""

SMALL_PROGRAM_POINTS = 1 << 22
"""A function whose loops run at most this many iterations in all (every linalg op's iteration space, times the
trips of the loops around it) is compiled at -O0 (`opt_level_for`): the small programs of the simulator, the
checks and the tests. LLVM's -O0 (no IR optimisation, fast instruction selection) compiles in about half the
time of -O2 and runs scalar loops a few times slower, so at this size -O0 costs less to run than it saves to
compile. A function of
unknown size (a dynamic trip count) gets `JIT_OPT_LEVEL`."""


class CompiledFunction:
    """A natively compiled function: call it with numpy arrays, get numpy arrays back."""

    def __init__(self, module_text: str, entry: str | None = None, *, opt_level: int | None = None):
        self._context = make_context()
        with self._context, ir.Location.unknown():
            module = ir.Module.parse(module_text)
            lower_loops(module.operation)
            loops_text = str(module) if foreign_llvm_tables() else None
            try:
                [signature] = prepare_kernels(module, [entry_function(module, entry)])
                opt_level = opt_level_for(module) if opt_level is None else opt_level
                JIT_PIPELINE.run(module)
            except (EntryError, KernelError) as exc:  # e.g. no such function, dynamic shapes, i1 buffers
                raise JitError(str(exc)) from None
            self.name, self.inputs, self.outputs = signature.name, list(signature.inputs), list(signature.outputs)
            self._assert_messages = take_messages(module)
            if USES_AMX_ATTR in module.operation.attributes:  # a pipeline with the contraction step, on an AMX CPU
                request_amx()
            self._kernel = None
            if loops_text is not None:  # this process cannot generate code: the LLVM tools build the same loops
                self._kernel, self._status = compile_kernel(loops_text, self.name, pipeline=LOOPS_PIPELINE), None
                return
            # The engine owns the compiled code: keep it alive as long as this object.
            try:
                self._engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=runner_utils_libraries())
            except RuntimeError as exc:  # "Failure while creating the ExecutionEngine" (LLVM translation failed)
                raise JitError(f"the JIT cannot compile @{self.name}: {exc} (an op with no LLVM lowering; the "
                               "diagnostic is on stderr)") from None
            self._status = self._status_function() if self._assert_messages else None

    def _status_function(self):
        """`status()`: the number of the check that failed in the last call (0: none), see asserts.py. Called
        through the engine's packed wrapper (`raw_lookup`), whose one argument points at the result."""
        packed = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._engine.raw_lookup(STATUS_FUNCTION))
        result = ctypes.c_int32(0)
        arguments = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(result), ctypes.c_void_p))

        def status() -> int:
            packed(arguments)
            return result.value

        return status

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
        if self._kernel is not None:
            return self._kernel(*args)
        from mlir.runtime import get_ranked_memref_descriptor  # costly (it loads ml_dtypes): on first use only

        outputs = [np.empty(spec.shape, spec.dtype) for spec in self.outputs]
        descriptors = [ctypes.pointer(ctypes.pointer(get_ranked_memref_descriptor(a))) for a in args + outputs]
        self._engine.invoke(self.name, *descriptors)
        result = outputs[0] if len(outputs) == 1 else tuple(outputs)
        if self._status is not None and (number := self._status()):
            raise check_failed(self.name, number, self._assert_messages, result)
        return result


def compile_function(module: ir.Module | ir.Operation | str, entry: str | None = None, *,
                     opt_level: int | None = None) -> CompiledFunction:
    """Compile `entry` (default: the single public function) of `module` for this CPU, at LLVM's `opt_level`
    (default: by the function's size, `opt_level_for`)."""
    return CompiledFunction(module if isinstance(module, str) else str(module), entry, opt_level=opt_level)


def opt_level_for(module: ir.Module) -> int:
    """0 for a module whose loops run at most `SMALL_PROGRAM_POINTS` iterations in all, else `JIT_OPT_LEVEL`.
    Read after the slicer loops are lowered, on tensors: each linalg op's points (`loop_sizes`), each other op's
    tensor elements, times the trips of the `scf.for` loops around it."""
    points = 0
    for op in walk_ops(module.operation):
        if is_linalg_op(op):
            sizes = loop_sizes(op)
        else:  # elementwise arith/math on tensors become linalg ops; copies and views count as their elements
            sizes = [d for r in op.results if isinstance(r.type, ir.RankedTensorType)
                     for d in ir.RankedTensorType(r.type).shape]
            if not sizes:
                continue
        trips = _trips_around(op)
        static = [d for d in sizes if d is not None and d >= 0]
        if trips is None or len(static) != len(sizes):
            return JIT_OPT_LEVEL  # a dynamic size
        points += math.prod(static) * trips
        if points > SMALL_PROGRAM_POINTS:
            return JIT_OPT_LEVEL
    return 0


def _trips_around(op: ir.Operation) -> int | None:
    """How many times the `scf.for` loops around `op` run it (None if a bound is not a constant)."""
    trips, parent = 1, op.parent
    while parent is not None:
        if parent.name == scf.ForOp.OPERATION_NAME:
            low, high, step = (_constant_index(v) for v in list(parent.operands)[:3])
            if low is None or high is None or step is None or step <= 0:
                return None
            trips *= max(0, -(-(high - low) // step))
        parent = parent.parent
    return trips


def _constant_index(value: ir.Value) -> int | None:
    owner = value.owner if not isinstance(value, ir.BlockArgument) else None
    if owner is None or owner.name != arith.ConstantOp.OPERATION_NAME:
        return None
    return ir.IntegerAttr(owner.attributes[VALUE_ATTR]).value


def compile_functions(module: str, names: list[str]) -> dict[str, CompiledFunction]:
    """Each of `names` compiled from `module`, by name, with a progress line on a terminal (many kernels take
    a while: one ExecutionEngine each)."""
    compiled = {}
    with Progress(f"JIT-compiling {len(names)} kernels", total=len(names)) as progress:
        for name in names:
            progress.step(name)
            compiled[name] = compile_function(module, name)
    return compiled


def run(module: ir.Module | ir.Operation | str, *arrays: np.ndarray, entry: str | None = None):
    """Compile and call once: `run(module, a, b)` -> numpy array (tuple if several results)."""
    return compile_function(module, entry)(*arrays)
