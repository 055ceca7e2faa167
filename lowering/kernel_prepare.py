"""Giving a module's kernel functions the kernels' calling convention (`kernel.py`) before the kernel pipeline,
and reading their signatures as `ArraySpec`s: the one preparation the JIT and the AOT compiler share.

Apart from `kernel.py` because it reads MLIR types, which loading compiled kernels does not need.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlir import ir

from slicer.core import dtypes
from slicer.core.errors import KernelError
from slicer.core.functions import function_name, function_type
from slicer.core.names import EMIT_C_INTERFACE_ATTR, MESH, WRITABLE_ATTR
from slicer.dialect import walk_ops

from .kernel import ArraySpec


def array_spec(type_: ir.Type, what: str) -> ArraySpec:
        """The spec of a statically shaped tensor type (KernelError otherwise); `what` names the value. i1
        tensors are numpy booleans: one byte each, which the kernel reads as i8 (see widen_i1.py)."""
        if not isinstance(type_, ir.RankedTensorType) or not type_.has_static_shape:
            raise KernelError(f"{what} has type {type_}; kernels take statically shaped tensors only")
        name = str(type_.element_type)
        dtype = dtypes.numpy_dtype(name)
        if dtype is None:
            raise KernelError(f"{what}: {dtypes.unsupported(name)}")
        return ArraySpec(tuple(type_.shape), dtype)


@dataclass(frozen=True)
class Signature:
    """A kernel function's name and the specs of its inputs and outputs (its results, which become out-params)."""

    name: str
    inputs: tuple[ArraySpec, ...]
    outputs: tuple[ArraySpec, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "inputs": [s.to_json() for s in self.inputs],
                "outputs": [s.to_json() for s in self.outputs]}


def prepare_kernels(module: ir.Module, functions: list[ir.Operation]) -> list[Signature]:
    """Give `functions` of `module` the kernel calling convention, in place, before the kernel pipeline: a C
    interface (`_mlir_ciface_<name>`) and read-only inputs (bufferization copies before writing into one); the
    module's mesh declarations, which no kernel reads, are dropped. Returns their signatures, in order
    (KernelError for an argument or result that is not a statically shaped tensor of a supported dtype)."""
    for op in walk_ops(module, MESH):
        op.erase()
    signatures = []
    for func in functions:
        name, fn_type = function_name(func), function_type(func)
        inputs = tuple(array_spec(t, f"argument #{i} of @{name}") for i, t in enumerate(fn_type.inputs))
        outputs = tuple(array_spec(t, f"result #{i} of @{name}") for i, t in enumerate(fn_type.results))
        signatures.append(Signature(name, inputs, outputs))
        func.attributes[EMIT_C_INTERFACE_ATTR] = ir.UnitAttr.get()
        read_only = ir.DictAttr.get({WRITABLE_ATTR: ir.BoolAttr.get(False)})
        func.opview.arg_attrs = ir.ArrayAttr.get([read_only] * len(inputs))
    return signatures


