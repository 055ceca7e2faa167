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

Why not `mlir.runtime.get_ranked_memref_descriptor` per call: it defines a new
ctypes class per call (~200 us measured). Here there is one descriptor class
per rank, and each argument slot remembers the descriptors of the last few
arrays it saw: a repeated call with the same arrays costs ~4 us (measured;
Python checks of shape/dtype per argument), and `Kernel.bind` takes the checks
out of the loop: ~1 us, one ctypes call. A slot holds its arrays weakly (a
descriptor is used only while its array is alive, so a reused address cannot
match a dead array's): holding them kept every intermediate block of a training
step's last 4 runs alive, most of a rank's 2.5-3.1 GiB.
"""

from __future__ import annotations

import ctypes
import math
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slicer.core.errors import KernelAssertionError, KernelError

from .workspace import WORKSPACE_SHARE, WORKSPACE_STATE

_DESCRIPTOR_CLASSES: dict[int, type[ctypes.Structure]] = {}
SLOT_CACHE_SIZE = 4

STATUS_FUNCTION = "__slicer_failed_assert"
"""The exported function a caller calls after a kernel: the number of the last failed check, then reset (the
module gains it from `asserts.checked_asserts`)."""


def check_failed(kernel: str, number: int, messages: tuple[str, ...]) -> KernelAssertionError:
    """The error for check `number` (1-based) of a kernel's module failing in a call of `kernel`."""
    message = messages[number - 1] if 0 < number <= len(messages) else f"check #{number}"
    return KernelAssertionError(
        f"a run-time check of the program failed in kernel @{kernel}: '{message}'. The program checks this on "
        f"its input data (for example token ids within an embedding's table, as PyTorch does); fix the inputs")


@dataclass(frozen=True)
class ArraySpec:
    """Shape and numpy dtype of one argument (input or output) of a kernel or a JIT-compiled function."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def to_json(self) -> dict:
        return {"shape": list(self.shape), "dtype": self.dtype.name}

    @staticmethod
    def from_json(data: dict) -> "ArraySpec":
        return ArraySpec(tuple(data["shape"]), np.dtype(data["dtype"]))

    def __str__(self) -> str:
        return f"{self.dtype.name}[{'x'.join(map(str, self.shape))}]"


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose buffer starts on an `align`-byte boundary.

    numpy's own buffers are only 16-byte aligned; full-cache-line (64-byte) alignment keeps AVX-512
    loads and stores from straddling lines (matmul 512 measured ~20% faster with aligned operands).
    """
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)  # as np.empty takes it
    return _aligned_empty_at(shape, np.dtype(dtype), align)[0]


def _aligned_empty_at(shape: tuple, dtype: np.dtype, align: int = 64) -> tuple[np.ndarray, int]:
    """`aligned_empty` and its buffer's address (what a descriptor points at), read once: ~1.5 us where
    slicing, viewing and reshaping a byte buffer took ~4 us, per output of every kernel call."""
    count = math.prod(shape)
    raw = np.empty(count * dtype.itemsize + align, np.uint8)
    base = raw.ctypes.data
    start = (-base) % align
    return np.ndarray(shape, dtype, buffer=raw, offset=start), base + start


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
        stride = 1
        strides = []
        for size in reversed(array.shape):
            strides.append(stride)
            stride *= size
        desc.sizes[:] = list(array.shape)
        desc.strides[:] = strides[::-1]
    return desc


class _Slot:
    """One argument position: its spec and the descriptors of the last arrays passed there."""

    __slots__ = ("kernel", "index", "role", "spec", "shape", "dtype", "entries", "template")

    def __init__(self, kernel: str, index: int, role: str, spec: ArraySpec):
        self.kernel, self.index, self.role, self.spec = kernel, index, role, spec
        self.shape, self.dtype = spec.shape, spec.dtype
        self.entries: list[tuple[weakref.ref, ctypes.Structure, int]] = []
        self.template = make_descriptor(np.empty(spec.shape, spec.dtype))  # sizes and strides of `fresh`'s
        self.template.allocated = self.template.aligned = None

    def fresh(self) -> tuple[np.ndarray, ctypes.Structure]:
        """A new 64-byte aligned array of this slot's spec and a descriptor viewing it, not remembered (a kernel's
        outputs are new at every call): ~2 us where allocating, checking and caching one took ~6 us, which made
        most of the time of a training step's optimizer kernels (49 outputs each)."""
        array, address = _aligned_empty_at(self.shape, self.dtype)
        desc = type(self.template).from_buffer_copy(self.template)
        desc.allocated = desc.aligned = address
        return array, desc

    def address(self, array) -> int:
        """The descriptor address for `array` (hot path: a few `is` and tuple comparisons)."""
        for cached, _, pointer in self.entries:
            if cached() is array:
                # Same object, same buffer; shape/dtype can still be reassigned in place.
                if array.shape != self.shape or (array.dtype is not self.dtype and array.dtype != self.dtype):
                    self._check(array)
                return pointer
        return self._miss(array)

    def _miss(self, array) -> int:
        self._check(array)
        desc = make_descriptor(array)
        pointer = ctypes.addressof(desc)
        self.entries.insert(0, (weakref.ref(array), desc, pointer))
        del self.entries[SLOT_CACHE_SIZE:]
        return pointer

    def _check(self, array) -> None:
        what = f"{self.role} #{self.index} of kernel @{self.kernel}"
        if not isinstance(array, np.ndarray):
            raise KernelError(f"{what} must be a numpy array {self.spec}, got {type(array).__name__}")
        if array.dtype != self.spec.dtype:
            raise KernelError(
                f"{what} must have dtype {self.spec.dtype.name}, got {array.dtype.name} (convert with .astype(np.{self.spec.dtype.name}))"
            )
        if array.shape != self.spec.shape:
            raise KernelError(f"{what} must have shape {self.spec.shape}, got {array.shape}")
        if not array.flags.c_contiguous:
            raise KernelError(f"{what} is not C-contiguous; pass np.ascontiguousarray(...) (kernels never copy)")
        if self.role == "output" and not array.flags.writeable:
            raise KernelError(f"{what} is read-only; pass a writeable array")

    def clear(self) -> None:
        self.entries.clear()


class Kernel:
    """One compiled function: `kernel(*inputs, out=None)` writes into `out` (allocated if None)."""

    def __init__(self, library: "KernelLibrary", name: str, inputs: list[ArraySpec], outputs: list[ArraySpec]):
        self.library = library  # keeps the shared object loaded while this kernel exists
        self.name = name
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        try:
            function = getattr(library.handle, f"_mlir_ciface_{name}")
        except AttributeError:
            raise KernelError(f"{library.path} has no symbol _mlir_ciface_{name}; the cache entry is stale, delete it") from None
        function.argtypes = [ctypes.c_void_p] * (len(inputs) + len(outputs))
        function.restype = None
        self._function = function
        self._check = library.check_asserts  # None when the module makes no run-time checks
        self._in_slots = [_Slot(name, i, "input", s) for i, s in enumerate(inputs)]
        self._out_slots = [_Slot(name, i, "output", s) for i, s in enumerate(outputs)]
        # the buffer addresses of the outputs the last call without out= made (for the runtime's count of what it
        # holds, `runtime/buffer_tracker.py`); None after a call with out=
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
        addresses = [slot.address(a) for slot, a in zip(self._in_slots, inputs)]
        if out is None:
            made = [slot.fresh() for slot in self._out_slots]
            outputs = [array for array, _ in made]
            addresses += [ctypes.addressof(desc) for _, desc in made]  # (`made` keeps them alive over the call)
            self.addresses = [desc.aligned for _, desc in made]
        else:
            self.addresses = None
            outputs = [out] if isinstance(out, np.ndarray) else list(out)
            if len(outputs) != len(self._out_slots):
                raise KernelError(f"kernel @{self.name} has {len(self._out_slots)} outputs, out= gives {len(outputs)}")
            addresses += [slot.address(array) for slot, array in zip(self._out_slots, outputs)]
        self._function(*addresses)
        if self._check is not None:
            self._check(self.name)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def bind(self, *inputs: np.ndarray, out) -> "BoundCall":
        """Validate once and return a no-argument callable running this kernel on these exact arrays.

        For loops that reuse the same buffers (the SPMD launcher's steps): a call costs one ctypes
        call (~0.5 us) and no checks. The bound call keeps the arrays alive.
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

    def clear_descriptor_cache(self) -> None:
        """Drop the remembered descriptors (and the references to the arrays they view)."""
        for slot in self._in_slots + self._out_slots:
            slot.clear()


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
        """`check(kernel_name)`: raise KernelAssertionError if a check failed in the last kernel call."""
        try:
            status = getattr(self.handle, STATUS_FUNCTION)
        except AttributeError:
            raise KernelError(f"{self.path} has no symbol {STATUS_FUNCTION}; the cache entry is stale, delete it") from None
        status.argtypes, status.restype = [], ctypes.c_int32
        messages = self.assert_messages

        def check(kernel: str) -> None:
            number = status()
            if number:
                raise check_failed(kernel, number, messages)

        return check

    def __getitem__(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise KernelError(f"no kernel @{name} in this library (kernels: {', '.join('@' + k for k in self.kernels)})") from None

    def __contains__(self, name: str) -> bool:
        return name in self.kernels

    def __iter__(self):
        return iter(self.kernels.values())

    def __len__(self) -> int:
        return len(self.kernels)

    def __repr__(self) -> str:
        state = "cache hit" if self.cache_hit else f"compiled in {self.compile_seconds:.2f} s"
        return f"KernelLibrary({', '.join('@' + k for k in self.kernels)}; {state}; {self.path})"
