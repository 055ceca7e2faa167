"""Run-time checks that fail as errors, not as a dead process (`slicer-kernel-clamp-gathers`,
`slicer-kernel-checked-asserts`).

Programs imported from PyTorch check data-dependent indices with `cf.assert` (an embedding's token ids:
"index must be smaller than dim size"). MLIR lowers a failed `cf.assert` to a message and `abort()`, which
kills the Python process that runs the kernel (the in-process simulator, or a user's notebook) with no
exception to catch. These two steps make a failed check an error the caller sees:

- `clamp_gathers` (on tensors, before bufferization): every `tensor.extract` inside a `linalg.generic` body
  whose indices are computed (a gather) reads at indices clamped into the tensor's bounds. In-range indices
  are unchanged; an out-of-range one (undefined behaviour in MLIR, a wild read in practice) now reads an
  element of the tensor, so the kernel finishes and reports the failed check instead of crashing.
- `checked_asserts` (on loops, before the conversion to LLVM): each `cf.assert` becomes "if the condition
  is false, record the assertion's number in a module global". The module gains a public function
  `__slicer_failed_assert() -> i32` returning the last failed number (0: none) and resetting it, and the
  attribute `slicer.assert_messages` listing the messages by number; the kernel callers (`kernel.py`,
  `jit.py`) read and drop the attribute, call the function after every kernel call of a module that has
  checks, and raise `KernelAssertionError` with the message.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, cf, func, linalg, memref, scf, tensor

from slicer.core.names import ASSERT_MESSAGES_ATTR
from slicer.core.operations import walk_ops

from .kernel import STATUS_FUNCTION

_FLAG = "__slicer_failed_assert_flag"


def clamp_gathers(module: ir.Module) -> None:
    """Clamp the computed indices of every `tensor.extract` in a `linalg.generic` body into its bounds."""
    extracts = [op for op in walk_ops(module, tensor.ExtractOp.OPERATION_NAME)
                if op.parent is not None and op.parent.name == linalg.GenericOp.OPERATION_NAME]
    for op in extracts:
        shape = ir.RankedTensorType(op.operands[0].type).shape
        with ir.InsertionPoint(op), op.location:
            for position, size in enumerate(shape):
                index = op.operands[1 + position]
                if _is_constant(index):
                    continue
                zero = arith.constant(ir.IndexType.get(), 0)
                last = arith.constant(ir.IndexType.get(), size - 1)
                op.operands[1 + position] = arith.minsi(arith.maxsi(index, zero), last)


def _is_constant(value: ir.Value) -> bool:
    return isinstance(value, ir.OpResult) and value.owner.name == arith.ConstantOp.OPERATION_NAME


def checked_asserts(module: ir.Module) -> None:
    """Replace every `cf.assert` by a recorded failure (see the module docstring); no change without any."""
    asserts = list(walk_ops(module, cf.AssertOp.OPERATION_NAME))
    if not asserts:
        return
    i32 = ir.IntegerType.get_signless(32)
    flag_type = ir.MemRefType.get([], i32)
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
        memref.global_(sym_name=_FLAG, type_=flag_type, sym_visibility="private",
                       initial_value=ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get([], i32),
                                                                    ir.IntegerAttr.get(i32, 0)))
    messages: list[str] = []
    for op in asserts:
        message = ir.StringAttr(op.opview.msg).value
        messages.append(message)
        with ir.InsertionPoint(op), op.location:
            failed = arith.xori(op.operands[0], arith.constant(ir.IntegerType.get_signless(1), 1))
            branch = scf.IfOp(failed)
            with ir.InsertionPoint(branch.then_block):
                memref.store(arith.constant(i32, len(messages)), memref.get_global(flag_type, _FLAG), [])
                scf.yield_([])
        op.erase()
    with ir.InsertionPoint(module.body), ir.Location.unknown():
        status = func.FuncOp(STATUS_FUNCTION, ([], [i32]))
        with ir.InsertionPoint(status.add_entry_block()):
            flag = memref.get_global(flag_type, _FLAG)
            number = memref.load(flag, [])
            memref.store(arith.constant(i32, 0), flag, [])
            func.return_([number])
    module.operation.attributes[ASSERT_MESSAGES_ATTR] = ir.ArrayAttr.get([ir.StringAttr.get(m) for m in messages])


def take_messages(module: ir.Module) -> tuple[str, ...]:
    """The checks' messages recorded by `checked_asserts` (removed from the module); () if it has none."""
    attributes = module.operation.attributes
    if ASSERT_MESSAGES_ATTR not in attributes:
        return ()
    messages = tuple(ir.StringAttr(m).value for m in ir.ArrayAttr(attributes[ASSERT_MESSAGES_ATTR]))
    del attributes[ASSERT_MESSAGES_ATTR]
    return messages
