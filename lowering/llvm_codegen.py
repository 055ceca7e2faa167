"""LLVM code generation inside this process: an LLVM-dialect module to an object file.

What it does is `mlir-translate --mlir-to-llvmir | llc -O3 -mcpu=<cpu> -mattr=<features>
-relocation-model=pic -filetype=obj`, through the C APIs of the libraries the MLIR bindings have already
loaded: MLIR's `mlirTranslateModuleToLLVMIR` (in `libMLIRPythonCAPI.so`) and LLVM's target-machine API (in the
`libLLVM.so` it links), called with ctypes. The object is the same, instruction for instruction
(`test/unit/lowering/test_llvm_codegen.py` compares the two with objdump).

Why not the tools: a build printed its LLVM-dialect module as text (6.5 MB for a 2-block GPT training step),
which mlir-translate parsed again and printed as LLVM IR (4.3 MB), which llc parsed again; that is about a
quarter of a kernel build, paid again for every build in a test run or a cold compile. The upstream
ExecutionEngine generates code in-process the same way; no binding exposes the object-file path, hence ctypes.

`available()` says whether this process can: not when another LLVM's tables were bound first
(`foreign_llvm.foreign_llvm_tables`: torch-mlir imported before MLIR), nor where the libraries lack the
symbols; `aot.py` then runs the tools, which remain the documented fallback (`SLICER_KERNEL_CODEGEN=tools`
forces them).

LLVM's calls release the GIL (ctypes.CDLL), so the build groups of `aot.compile_kernels` generate code on
every core at once; each build has its own LLVMContext and target machine.
"""

from __future__ import annotations

import ctypes
import os
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlir import ir

from slicer.core import environment
from slicer.core.capsules import OPERATION_CAPSULE, capsule_pointer
from slicer.core.errors import KernelError

from .foreign_llvm import foreign_llvm_tables

CODEGEN_ENV = environment.KERNEL_CODEGEN.name
"""`tools` runs mlir-translate and llc as processes; unset or `in-process` generates code here when it can."""

_OPT_AGGRESSIVE = 3  # LLVMCodeGenOptLevel: llc -O3
_RELOC_PIC = 2  # LLVMRelocMode: -relocation-model=pic
_CODE_MODEL_DEFAULT = 0
_OBJECT_FILE = 1  # LLVMCodeGenFileType
_X86_INITIALIZERS = ("LLVMInitializeX86TargetInfo", "LLVMInitializeX86Target", "LLVMInitializeX86TargetMC",
                     "LLVMInitializeX86AsmPrinter")

_vp = ctypes.c_void_p
_char_pp = ctypes.POINTER(ctypes.c_char_p)


class _MlirOperation(ctypes.Structure):
    """MLIR's C handle of an operation (a struct holding one pointer, passed by value)."""

    _fields_ = [("ptr", ctypes.c_void_p)]


_SIGNATURES = {
    # name: (argument types, result type)
    "mlirTranslateModuleToLLVMIR": ([_MlirOperation, _vp], _vp),
    "LLVMContextCreate": ([], _vp),
    "LLVMContextDispose": ([_vp], None),
    "LLVMDisposeModule": ([_vp], None),
    "LLVMDisposeMessage": ([_vp], None),
    "LLVMGetDefaultTargetTriple": ([], _vp),
    "LLVMGetHostCPUName": ([], _vp),
    "LLVMGetHostCPUFeatures": ([], _vp),
    "LLVMGetTargetFromTriple": ([ctypes.c_char_p, ctypes.POINTER(_vp), _char_pp], ctypes.c_int),
    "LLVMCreateTargetMachine": ([_vp, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                 ctypes.c_int, ctypes.c_int], _vp),
    "LLVMDisposeTargetMachine": ([_vp], None),
    "LLVMCreateTargetDataLayout": ([_vp], _vp),
    "LLVMDisposeTargetData": ([_vp], None),
    "LLVMSetModuleDataLayout": ([_vp, _vp], None),
    "LLVMSetTarget": ([_vp, ctypes.c_char_p], None),
    "LLVMTargetMachineEmitToFile": ([_vp, _vp, ctypes.c_char_p, ctypes.c_int, _char_pp], ctypes.c_int),
}


_HOLDING_THE_GIL = frozenset({"mlirTranslateModuleToLLVMIR"})
"""Called with the GIL held (through ctypes.PyDLL): translation reports its errors to the context's diagnostic
handler, a Python function. The others release it (ctypes.CDLL), so that builds generate code in parallel."""


class _Api:
    """The C functions, typed, and the host's triple, CPU name and features (LLVM's answers, as llc's)."""

    def __init__(self, path: str):
        releasing, holding = ctypes.CDLL(path), ctypes.PyDLL(path)
        for name, (arguments, result) in _SIGNATURES.items():
            function = getattr(holding if name in _HOLDING_THE_GIL else releasing, name)
            function.argtypes, function.restype = arguments, result
            setattr(self, name, function)
        for name in _X86_INITIALIZERS:
            getattr(releasing, name)()
        self.triple = self._take_string(self.LLVMGetDefaultTargetTriple())
        self.host_cpu = self._take_string(self.LLVMGetHostCPUName())
        self.host_features = self._take_string(self.LLVMGetHostCPUFeatures())

    if TYPE_CHECKING:
        def __getattr__(self, name: str) -> Any: ...  # the C functions of _SIGNATURES, set by __init__

    def _take_string(self, pointer: int | None) -> str:
        text = ctypes.string_at(pointer).decode() if pointer else ""
        if pointer:
            self.LLVMDisposeMessage(pointer)
        return text


_LOCK = threading.Lock()


@lru_cache(maxsize=1)
def _api() -> _Api | None:
    with _LOCK:
        try:
            return _Api(str(Path(ir.__file__).parent / "_mlir_libs" / "libMLIRPythonCAPI.so"))
        except (OSError, AttributeError):
            return None  # another build of the bindings, without these symbols: the tools do it


def _loaded() -> _Api:
    """The C API, where `available()` said yes."""
    api = _api()
    if api is None:
        raise KernelError("in-process code generation is not available here (see llvm_codegen.available)")
    return api


def available() -> bool:
    """Whether code can be generated in this process (else `aot.py` runs mlir-translate and llc)."""
    choice = environment.value(environment.KERNEL_CODEGEN) or "in-process"
    if choice not in ("in-process", "tools"):
        raise KernelError(f"${CODEGEN_ENV}={choice!r}: use 'in-process' or 'tools'")
    if choice == "tools" or platform_machine() != "x86_64":
        return False
    return not foreign_llvm_tables() and _api() is not None


def platform_machine() -> str:
    return os.uname().machine


def cpu_and_features(cpu: str, features: str) -> tuple[str, str]:
    """What llc makes of `-mcpu=<cpu> -mattr=<features>`: `native` is the host's CPU name with the host's
    features, followed by the requested ones (later entries win in LLVM's feature strings)."""
    if cpu != "native":
        return cpu, features
    api = _loaded()
    host = api.host_features
    return api.host_cpu, f"{host},{features}" if features and host else (features or host)


class LlvmModule:
    """An LLVM module and the LLVMContext it lives in, owned here: `emit` disposes of both."""

    def __init__(self, context: int, module: int):
        self.context: int | None = context
        self.module: int | None = module

    def dispose(self) -> None:
        api = _loaded()
        if self.module:
            api.LLVMDisposeModule(self.module)
        if self.context:
            api.LLVMContextDispose(self.context)
        self.context = self.module = None


def translate(module: ir.Module) -> LlvmModule:
    """`module` (LLVM dialect, in its context) as LLVM IR, as `mlir-translate --mlir-to-llvmir` makes it. A
    module that does not translate raises KernelError carrying MLIR's diagnostics, notes included."""
    api = _loaded()
    context = api.LLVMContextCreate()
    operation = _MlirOperation(capsule_pointer(module.operation._CAPIPtr, OPERATION_CAPSULE))
    with _Diagnostics(module.context) as diagnostics:
        llvm_module = api.mlirTranslateModuleToLLVMIR(operation, context)
    if not llvm_module:
        api.LLVMContextDispose(context)
        raise KernelError(f"translation to LLVM IR failed: {diagnostics.text() or 'no diagnostic'}")
    return LlvmModule(context, llvm_module)


def emit(llvm_module: LlvmModule, cpu: str, features: str, output: Path) -> None:
    """Write the object code of `llvm_module` to `output`, as `llc -O3 -mcpu=<cpu> -mattr=<features>
    -relocation-model=pic -filetype=obj` does, then dispose of the module (whatever happens: a caller that
    stopped waiting leaves it to this function). A failed emission raises KernelError with LLVM's message."""
    api = _loaded()
    cpu_name, feature_text = cpu_and_features(cpu, features)
    machine = data_layout = None
    try:
        target, message = _vp(), ctypes.c_char_p()
        if api.LLVMGetTargetFromTriple(api.triple.encode(), ctypes.byref(target), ctypes.byref(message)):
            raise KernelError(f"llc failed: no target for {api.triple}: {_message(api, message)}")
        machine = api.LLVMCreateTargetMachine(target, api.triple.encode(), cpu_name.encode(),
                                              feature_text.encode(), _OPT_AGGRESSIVE, _RELOC_PIC,
                                              _CODE_MODEL_DEFAULT)
        data_layout = api.LLVMCreateTargetDataLayout(machine)
        api.LLVMSetTarget(llvm_module.module, api.triple.encode())
        api.LLVMSetModuleDataLayout(llvm_module.module, data_layout)
        if api.LLVMTargetMachineEmitToFile(machine, llvm_module.module, str(output).encode(), _OBJECT_FILE,
                                           ctypes.byref(message)):
            raise KernelError(f"llc failed: {_message(api, message)}")
    finally:
        if data_layout:
            api.LLVMDisposeTargetData(data_layout)
        if machine:
            api.LLVMDisposeTargetMachine(machine)
        llvm_module.dispose()


def _message(api: _Api, message: ctypes.c_char_p) -> str:
    text = message.value.decode(errors="replace") if message.value else "no message"
    if message.value:
        api.LLVMDisposeMessage(ctypes.cast(message, _vp))
    return text


class _Diagnostics:
    """MLIR's diagnostics while translating, each with its notes, as the tool would print them."""

    def __init__(self, context: ir.Context):
        self.context, self.lines = context, list[str]()

    def __enter__(self) -> _Diagnostics:
        self.handler = self.context.attach_diagnostic_handler(self._take)
        return self

    def __exit__(self, *exc) -> None:
        self.handler.detach()

    def _take(self, diagnostic: ir.Diagnostic) -> bool:
        self.lines.append(f"{diagnostic.location}: {diagnostic.message}")
        self.lines.extend(f"  note: {note.location}: {note.message}" for note in diagnostic.notes)
        return True

    def text(self) -> str:
        return "\n".join(self.lines)


__all__ = ["CODEGEN_ENV", "LlvmModule", "available", "cpu_and_features", "emit", "translate"]
