"""The kernels' calling convention: marking functions as kernels, and calling them with numpy arrays through
memref descriptors, without copies.

A kernel is a `_mlir_ciface_<name>(inputs..., outputs...)` function of a shared
library: each argument is a pointer to a memref descriptor
`{allocated, aligned, offset, sizes[rank], strides[rank]}` pointing at the
numpy buffer itself. Outputs are written in place into caller-provided arrays.
`kernel_prepare.prepare_kernels` gives a module's kernel functions that convention
before the kernel pipeline runs (the one preparation the JIT and the AOT compiler
share) and reads their signatures as `ArraySpec`s; this module imports no MLIR, so
an MPI rank loads its compiled kernels without the bindings.

Details: docs/module-notes.md, `lowering/kernel.py`.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import KernelAssertionError, KernelError

from .amx_permission import request_amx
from .workspace import WORKSPACE_SHARE, WORKSPACE_STATE

_DESCRIPTOR_CLASSES: dict[int, type[ctypes.Structure]] = {}
ALIGN = 64
"""The byte boundary the arrays a kernel call makes start on (`aligned_empty`: a cache line)."""

STATUS_FUNCTION = "__slicer_failed_assert"
"""The exported function a caller calls after a kernel: the number of the last failed check, then reset (the
module gains it from `asserts.checked_asserts`)."""


def check_failed(kernel: str, number: int, messages: tuple[str, ...], outputs=None) -> KernelAssertionError:
    """The error for check `number` (1-based) of a kernel's module failing in a call of `kernel`. Its
    `outputs` are what the call wrote (it ran to the end: gathers read clamped indices, `asserts.py`), so a
    rank running a step with other ranks can finish the step before failing it (`runtime/execution/executor.py`)."""
    message = messages[number - 1] if 0 < number <= len(messages) else f"check #{number}"
    error = KernelAssertionError(
        f"a run-time check of the program failed in kernel @{kernel}: '{message}'. The program checks this on "
        f"its input data (for example token ids within an embedding's table, as PyTorch does); fix the inputs")
    error.check, error.outputs = message, outputs
    return error


@dataclass(frozen=True)
class ArraySpec:
    """Shape and numpy dtype of one argument (input or output) of a kernel or a JIT-compiled function."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": dtypes.dtype_text(self.dtype)}

    @staticmethod
    def from_json(data: dict) -> ArraySpec:
        return ArraySpec(tuple(data["shape"]), dtypes.parse_dtype(data["dtype"]))

    def __str__(self) -> str:
        return f"{self.dtype.name}[{'x'.join(map(str, self.shape))}]"


def aligned_empty(shape, dtype, align: int = ALIGN) -> np.ndarray:
    """An uninitialised C-contiguous array whose buffer starts on an `align`-byte boundary.

    numpy's own buffers are only 16-byte aligned; full-cache-line (64-byte) alignment keeps AVX-512
    loads and stores from straddling lines (matmul 512 measured ~20% faster with aligned operands).
    """
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)  # as np.empty takes it
    dtype, count = np.dtype(dtype), math.prod(shape)
    return _aligned_block(count * dtype.itemsize + align, dtype, count, shape, align)[0]


def _aligned_block(nbytes: int, dtype: np.dtype, count: int, shape: tuple,
                   align: int = ALIGN) -> tuple[np.ndarray, int]:
    """A new array of `count` elements of `shape` starting on an `align`-byte boundary of a new `nbytes` buffer
    (`count` elements and `align` bytes), and its address: paid per output of every kernel call, so the address
    comes through the buffer protocol and the view by `np.frombuffer`, faster than `.ctypes.data` and
    `np.ndarray(buffer=)`."""
    raw = np.empty(nbytes, np.uint8)
    # (writable and never empty: `align` bytes at least; the ignore: an ndarray is a buffer, which numpy's stubs
    # say from Python 3.12 on only, and mypy checks 3.11)
    base = ctypes.addressof(ctypes.c_char.from_buffer(raw))  # type: ignore[arg-type]
    start = -base % align
    return np.frombuffer(raw, dtype, count, start).reshape(shape), base + start


def descriptor_class(rank: int) -> type[ctypes.Structure]:
    """The ctypes struct of a ranked memref descriptor (same layout as MLIR's C interface)."""
    cls = _DESCRIPTOR_CLASSES.get(rank)
    if cls is None:
        fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
        if rank:
            fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
        cls = type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})
        _DESCRIPTOR_CLASSES[rank] = cls
    return cls


def make_descriptor(array: np.ndarray) -> ctypes.Structure:
    """A descriptor viewing a C-contiguous array's buffer (strides in elements)."""
    desc = descriptor_class(array.ndim)()
    address = array.ctypes.data
    desc.allocated = desc.aligned = address
    desc.offset = 0
    if array.ndim:
        desc.sizes[:] = list(array.shape)
        desc.strides[:] = row_major_strides(array.shape)
    return desc


def row_major_strides(shape: tuple[int, ...]) -> list[int]:
    """A C-contiguous array's strides, in elements (as memref descriptors count them)."""
    strides, stride = [], 1
    for size in reversed(shape):
        strides.append(stride)
        stride *= size
    return strides[::-1]


class _Slot:
    """One argument position: its spec and where its descriptor's buffer addresses stand in a call's frame."""

    __slots__ = ("kernel", "index", "role", "spec", "shape", "dtype", "word", "count", "block_bytes", "remembered")

    def __init__(self, kernel: str, index: int, role: str, spec: ArraySpec, word: int):
        self.kernel, self.index, self.role, self.spec = kernel, index, role, spec
        self.shape, self.dtype = spec.shape, spec.dtype
        self.word = word  # the frame word of its descriptor's `allocated` field (`aligned` is the next)
        self.count = math.prod(spec.shape)
        self.block_bytes = self.count * spec.dtype.itemsize + ALIGN
        self.remembered: tuple[weakref.ref, int] | None = None  # the last input `address` read the slow way

    def fresh(self) -> tuple[np.ndarray, int]:
        """A new 64-byte aligned array of this slot's spec and its buffer's address (a kernel's outputs are new at
        every call)."""
        return _aligned_block(self.block_bytes, self.dtype, self.count, self.shape)

    def address(self, array: np.ndarray) -> int:
        """`array`'s buffer address once it is checked against the spec. Hot path: a plain writable array, read
        through the buffer protocol (an identity test, two tuple comparisons), which refuses a
        non-contiguous, read-only or empty buffer. Those take `_check`, which names the fault or accepts the array,
        and numpy's `.ctypes.data` (slower); an input among them is remembered (weakly: the memo keeps
        nothing alive) until another comes, as a runtime passes its read-only argument blocks at every run."""
        remembered = self.remembered
        if (remembered is not None and remembered[0]() is array and array.shape == self.shape
                and array.dtype is self.dtype):
            return remembered[1]
        if type(array) is np.ndarray and array.shape == self.shape and array.dtype is self.dtype:
            try:
                return ctypes.addressof(ctypes.c_char.from_buffer(array))  # type: ignore[arg-type]  # (as above)
            except (TypeError, ValueError, BufferError):
                pass
        self._check(array)
        address = array.ctypes.data
        if self.role == "input":
            self.remembered = (weakref.ref(array), address)
        return address

    def _check(self, array) -> None:
        what = f"{self.role} #{self.index} of kernel @{self.kernel}"
        if not isinstance(array, np.ndarray):
            raise KernelError(f"{what} must be a numpy array {self.spec}, got {type(array).__name__}")
        if array.dtype != self.spec.dtype:
            raise KernelError(
                f"{what} must have dtype {self.spec.dtype.name}, got {array.dtype.name} (convert with "
                f".astype(np.{self.spec.dtype.name}))"
            )
        if array.shape != self.spec.shape:
            raise KernelError(f"{what} must have shape {self.spec.shape}, got {array.shape}")
        if not array.flags.c_contiguous:
            raise KernelError(f"{what} is not C-contiguous; pass np.ascontiguousarray(...) (kernels never copy)")
        if self.role == "output" and not array.flags.writeable:
            raise KernelError(f"{what} is read-only; pass a writeable array")


class _Frame:
    """The memref descriptors of one kernel's arguments, inputs then outputs, back to back in int64 words (the
    layout of `descriptor_class`: allocated, aligned, offset, sizes, strides): the sizes and strides are written
    once here (the shapes are static); a call copies `template` and writes only the buffer addresses."""

    __slots__ = ("type", "template", "words", "offsets")

    def __init__(self, specs: list[ArraySpec]):
        words: list[int] = []
        self.words: list[int] = []  # per argument, the word of its `allocated` field
        for spec in specs:
            self.words.append(len(words))
            words += [0, 0, 0, *spec.shape, *row_major_strides(spec.shape)]
        self.type = ctypes.c_int64 * max(1, len(words))
        self.template = bytes(self.type(*words))
        self.offsets = [word * 8 for word in self.words]  # each descriptor's byte offset in the frame


class Kernel:
    """One compiled function: `kernel(*inputs, out=None)` writes into `out` (allocated if None)."""

    def __init__(self, library: KernelLibrary, name: str, inputs: list[ArraySpec], outputs: list[ArraySpec]):
        self.library = library  # keeps the shared object loaded while this kernel exists
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        try:
            function = getattr(library.handle, f"_mlir_ciface_{name}")
        except AttributeError:
            raise KernelError(
                f"{library.path} has no symbol _mlir_ciface_{name}; the cache entry is stale, delete it"
            ) from None
        function.argtypes = [ctypes.c_void_p] * (len(inputs) + len(outputs))
        function.restype = None
        self._function = function
        self._check = library.check_asserts  # None when the module makes no run-time checks
        self._frame = _Frame(self.inputs + self.outputs)
        words = self._frame.words
        self._in_slots = [_Slot(name, i, "input", s, words[i]) for i, s in enumerate(inputs)]
        self._out_slots = [_Slot(name, i, "output", s, words[len(inputs) + i]) for i, s in enumerate(outputs)]
        # the buffer addresses of the outputs the last call without out= made (for the runtime's count of what it
        # holds, `runtime/execution/buffer_tracker.py`); None after a call with out=
        self.addresses: list[int] | None = None

    def __repr__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        outs = ", ".join(map(str, self.outputs))
        return f"Kernel(@{self.name}: ({ins}) -> ({outs}))"

    def empty_outputs(self) -> list[np.ndarray]:
        """Fresh 64-byte aligned output arrays."""
        return [aligned_empty(s.shape, s.dtype) for s in self.outputs]

    def __call__(self, *inputs: np.ndarray, out=None):
        """Run on `inputs`; returns the output array (tuple if several). Outputs must not alias inputs."""
        if len(inputs) != len(self._in_slots):
            raise KernelError(f"kernel @{self.name} takes {len(self._in_slots)} input arrays, got {len(inputs)}")
        framing = self._frame
        frame = framing.type.from_buffer_copy(framing.template)
        for slot, array in zip(self._in_slots, inputs):
            frame[slot.word] = frame[slot.word + 1] = slot.address(array)
        if out is None:
            outputs, self.addresses = [], []
            for slot in self._out_slots:
                array, address = slot.fresh()
                outputs.append(array)
                self.addresses.append(address)
                frame[slot.word] = frame[slot.word + 1] = address
        else:
            self.addresses = None
            outputs = [out] if isinstance(out, np.ndarray) else list(out)
            if len(outputs) != len(self._out_slots):
                raise KernelError(f"kernel @{self.name} has {len(self._out_slots)} outputs, out= gives {len(outputs)}")
            for slot, array in zip(self._out_slots, outputs):
                frame[slot.word] = frame[slot.word + 1] = slot.address(array)  # a read-only one is refused
        self._function(*map(ctypes.addressof(frame).__add__, framing.offsets))  # `frame` lives over the call
        result = outputs[0] if len(outputs) == 1 else tuple(outputs)
        if self._check is not None:
            self._check(self.name, result)
        return result

    def bind(self, *inputs: np.ndarray, out) -> BoundCall:
        """Validate once and return a no-argument callable running this kernel on these exact arrays.

        For loops that reuse the same buffers (the SPMD launcher's steps): a call costs one ctypes
        call and no checks. The bound call keeps the arrays alive.
        """
        outputs = [out] if isinstance(out, np.ndarray) else list(out)
        if len(inputs) != len(self._in_slots) or len(outputs) != len(self._out_slots):
            raise KernelError(
                f"kernel @{self.name} takes {len(self._in_slots)} inputs and {len(self._out_slots)} outputs, "
                f"got {len(inputs)} and {len(outputs)}"
            )
        arrays = list(inputs) + outputs
        for slot, array in zip(self._in_slots + self._out_slots, arrays):
            slot._check(array)
        return BoundCall(self, arrays, [make_descriptor(a) for a in arrays])

    def call_uncached(self, *inputs: np.ndarray, out) -> None:
        """Same as `__call__` with fresh descriptors every call (the baseline the benchmark measures)."""
        descriptors = []
        for slot, array in zip(self._in_slots + self._out_slots, list(inputs) + list(out)):
            slot._check(array)
            descriptors.append(make_descriptor(array))
        self._function(*[ctypes.addressof(d) for d in descriptors])


class BoundCall:
    """A kernel applied to fixed arrays: `bound()` runs it. Holds the arrays and their descriptors."""

    __slots__ = ("kernel", "arrays", "_descriptors", "_addresses", "_function", "_check")

    def __init__(self, kernel: Kernel, arrays: list[np.ndarray], descriptors: list[ctypes.Structure]):
        self.kernel, self.arrays, self._descriptors = kernel, arrays, descriptors
        self._addresses = [ctypes.addressof(d) for d in descriptors]
        self._function = kernel._function
        self._check = kernel._check

    def __call__(self) -> None:
        self._function(*self._addresses)
        if self._check is not None:
            self._check(self.kernel.name)


_workspace: list[int] = []  # the address of the process's temporaries cache (the first library's)
_workspace_lock = threading.Lock()


def share_workspace(handle: ctypes.CDLL) -> None:
    """Make a loaded library's allocator use the process's one cache of temporaries (workspace.py): the first
    library's, which every later one is pointed at. Libraries built before the cache was shared have no hook
    and keep their own."""
    try:
        state, share = getattr(handle, WORKSPACE_STATE), getattr(handle, WORKSPACE_SHARE)
    except AttributeError:
        return
    state.argtypes, state.restype = [], ctypes.c_void_p
    share.argtypes, share.restype = [ctypes.c_void_p], None
    with _workspace_lock:
        if not _workspace:
            _workspace.append(state())
        else:
            share(_workspace[0])


class KernelLibrary:
    """The kernels of one compiled module, loaded from one shared object."""

    def __init__(self, path: Path, meta: dict, *, cache_hit: bool, compile_seconds: float):
        self.path = Path(path)
        self.key: str = meta["key"]
        self.cache_hit = cache_hit
        self.compile_seconds = compile_seconds
        self.meta = meta
        if meta.get("amx"):
            request_amx()  # before any kernel runs: else the first tile instruction is a SIGILL
        try:
            self.handle = ctypes.CDLL(str(self.path))
        except OSError as exc:
            raise KernelError(f"cannot load {self.path}: {exc}") from None
        share_workspace(self.handle)
        self.assert_messages: tuple[str, ...] = tuple(meta.get("asserts", ()))
        self.check_asserts = self._status_checker() if self.assert_messages else None
        self.kernels: dict[str, Kernel] = {}
        for item in meta["kernels"]:
            inputs = [ArraySpec.from_json(s) for s in item["inputs"]]
            outputs = [ArraySpec.from_json(s) for s in item["outputs"]]
            self.kernels[item["name"]] = Kernel(self, item["name"], inputs, outputs)

    def _status_checker(self):
        """`check(kernel_name, outputs)`: raise KernelAssertionError (carrying the call's `outputs`) if a check
        failed in the last kernel call."""
        try:
            status = getattr(self.handle, STATUS_FUNCTION)
        except AttributeError:
            raise KernelError(
                f"{self.path} has no symbol {STATUS_FUNCTION}; the cache entry is stale, delete it"
            ) from None
        status.argtypes, status.restype = [], ctypes.c_int32
        messages = self.assert_messages

        def check(kernel: str, outputs=None) -> None:
            number = status()
            if number:
                raise check_failed(kernel, number, messages, outputs)

        return check

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise KernelError(
                f"no kernel @{name} in this library (kernels: {', '.join('@' + k for k in self.kernels)})"
            ) from None

    def __contains__(self, name: str) -> bool:
        return name in self.kernels

    def __iter__(self):
        return iter(self.kernels.values())

    def __len__(self) -> int:
        return len(self.kernels)

    def __repr__(self) -> str:
        state = "cache hit" if self.cache_hit else f"compiled in {self.compile_seconds:.2f} s"
        return f"KernelLibrary({', '.join('@' + k for k in self.kernels)}; {state}; {self.path})"
