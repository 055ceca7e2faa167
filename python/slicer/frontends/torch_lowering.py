"""torch-mlir's lowering (torch dialect -> linalg on tensors) run in a child process, so that no model can kill
the user's Python process.

torch-mlir's pass pipelines abort on some inputs instead of reporting an error: `torch.scatter` (a MoE router
writing its top-k gates into zeros) ends in a segmentation fault or "LLVM ERROR: out of memory" inside the
TorchToTMTensor conversion. The fx importer (Python building torch-dialect IR, which cannot abort) stays in this
process; its output, printed with its locations (the Python source lines of every aten op), goes to the
`torch-mlir-opt` tool shipped in torch-mlir's wheel, which runs the same two pipelines `export_and_import` runs
and prints linalg on tensors, locations kept. The child is a native tool with no Python start-up: it costs
little against torch.export itself.

When the child dies, the op it was converting is read from its stack dump (torch-mlir names the conversion
pattern's op class, e.g. `ConvertAtenScatterOp<AtenScatterSrcOp>`), found in the torch-dialect IR, and named
in a FrontendError with the Python line that wrote it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from slicer.core.errors import FrontendError
from slicer.core.operations import walk_ops
from slicer.core.source_lines import source_line

#: The pipelines of torch_mlir.fx.export_and_import(output_type="linalg-on-tensors"), in one pass manager.
PIPELINE = ("builtin.module(func.func(torch-match-quantized-custom-ops),"
            "torchdynamo-export-to-torch-backend-pipeline{ extra-library=},"
            "torch-backend-to-linalg-on-tensors-backend-pipeline{allow-non-finites=true})")

#: A torch-dialect op class in a stack dump: `mlir::torch::Torch::AtenScatterSrcOp`.
_OP_CLASS = re.compile(r"Torch::((?:Aten|Prim|Torch)\w*?Op)\b")


def tool() -> Path:
    """The `torch-mlir-opt` executable of the installed torch-mlir (FrontendError if the wheel lacks it)."""
    from torch_mlir import _mlir_libs  # optional dependency, already loaded by the caller

    path = Path(_mlir_libs.__file__).resolve().parent / "torch-mlir-opt"
    if not path.is_file():
        raise FrontendError(f"torch-mlir's torch-mlir-opt tool is missing ({path}); reinstall torch-mlir "
                            "(pip install --force-reinstall torch-mlir)")
    return path


def lower(module, what: str) -> str:
    """Linalg-on-tensors MLIR text (with locations) for `module`, torch-mlir's raw torch-dialect import of
    `what`. Raises FrontendError: with torch-mlir's diagnostics (located at Python lines) when a pass fails,
    naming the op and its Python source line when torch-mlir crashes."""
    text = module.operation.get_asm(enable_debug_info=True)
    done = subprocess.run([str(tool()), "--mlir-print-debuginfo", f"--pass-pipeline={PIPELINE}", "-"],
                          input=text, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return done.stdout
    if done.returncode < 0 or "Stack dump" in done.stderr or "LLVM ERROR" in done.stderr:
        raise FrontendError(_crash_message(module, what, done.stderr, done.returncode))
    raise FrontendError(f"torch-mlir could not import {what}: {first_error(done.stderr)}")


def first_error(stderr: str) -> str:
    """torch-mlir-opt's first error diagnostic, at the Python line of its location (`where: error: what`)."""
    for line in stderr.splitlines():
        where, found, message = line.partition(" error: ")
        if found:
            at = source_line(where)
            operator = re.search(r'name = "(torch\.[\w.]+)"', message)  # torch.operator: an op torch-mlir lacks
            message = message.split(": %")[0]  # the op as printed, with its operands, types and location
            message += f" ({operator.group(1)})" if operator else ""
            message = message if len(message) <= 300 else message[:300] + " ..."
            return f"{message} (at {at})" if at else message
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[0] if lines else "no diagnostic"


def _crash_message(module, what: str, stderr: str, returncode: int) -> str:
    crashed = "crashed" if returncode < 0 else f"aborted (exit status {returncode})"
    op, line = crashing_op(module, stderr)
    if op is None:
        fatal = next((line.strip() for line in stderr.splitlines() if "LLVM ERROR" in line), "")
        return (f"torch-mlir {crashed} while lowering {what} to linalg{': ' + fatal if fatal else ''}; the Python "
                "process is unharmed. Simplify the model to find the op, or compute that part outside the model")
    where = f" at {line}" if line else ""
    return (f"torch-mlir {crashed} lowering '{op}'{where} in {what} (a torch-mlir bug on this op; the Python "
            f"process is unharmed). Write that line with other ops (e.g. a mask or one-hot product instead of "
            f"scatter), or compute it outside the imported model")


def crashing_op(module, stderr: str) -> tuple[str | None, str | None]:
    """(op name, Python source line) of the torch-dialect op whose conversion the stack dump `stderr` shows
    (the innermost frame naming an op class of `module`), or (None, None)."""
    ops: dict = {}
    for op in walk_ops(module):
        ops.setdefault(_class_key(op.name), op)
    for match in _OP_CLASS.finditer(stderr):
        op = ops.get(match.group(1).lower())
        if op is not None:
            return op.name, source_line(op.location)
    return None, None


def _class_key(op_name: str) -> str:
    """`torch.aten.scatter.src` -> `atenscattersrcop`, the lowercased C++ class `AtenScatterSrcOp`."""
    return op_name.removeprefix("torch.").replace(".", "").replace("_", "").lower() + "op"


__all__ = ["PIPELINE", "crashing_op", "first_error", "lower", "tool"]
