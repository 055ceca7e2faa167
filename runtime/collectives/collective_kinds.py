"""How each collective kind runs on a rank: the table ``EXECUTIONS`` (step class -> `Execution`), one entry per
kind, over MPI and over shared memory.

The step classes (`slicer.redistribution.steps`) know no MPI; what their execution needs is here, keyed by
class, so that the executors (`plan_executor.StepRunner`, `shm_collectives.ShmStep`) are one generic path and
a new kind is one class registered with :func:`executes` (docs/architecture.md, "A new collective"). An
`Execution` sets up one step's chunks and buffers (`packing`: also the scratch `slicer.viz.memory` counts),
packs, issues the MPI call (nonblocking ``issue`` or blocking ``call``), unpacks, and over shared memory copies
its block in (``shm_in``) and the result out (``shm_out``). The methods take the step's program (a
`plan_executor.StepRunner`: the step, shapes, dtype, group communicator and the buffers).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh
from slicer.redistribution import subaxes
from slicer.redistribution.steps import AllGather, AllReduce, AllSlice, AllToAll, Permute, ReduceScatter

from . import communicators
from .mpi_packing import Chunks, copy_runs

PERMUTE_TAG = 7
SMALL_REDUCE = 1 << 16  # an all_reduce of at most this many bytes runs in one phase over shared memory


def _mpi():
    from mpi4py import MPI
    return MPI


@dataclass
class Packing:
    """One step's chunks and MPI buffers for one input shape and dtype: ``send``/``recv`` are the
    ``(shape, dtype)`` of the packed send and receive buffers, None when the block (the output) is the buffer."""

    k: int = 1
    wide: np.dtype | None = None  # the dtype sums travel in over MPI (`dtypes.accumulation_dtype`)
    chunks: Chunks | None = None
    send_chunks: Chunks | None = None
    order: list[int] | None = None  # a reordering all-to-all: the chunk of the split dim member j receives
    send: tuple | None = None
    recv: tuple | None = None

    def scratch_bytes(self) -> int:
        return sum(int(np.prod(buffer[0], dtype=np.int64)) * np.dtype(buffer[1]).itemsize
                   for buffer in (self.send, self.recv) if buffer is not None)


class Execution(ABC):
    """The execution of a collective over a group of ranks (``mesh_axes``); subclasses fill in the kind."""

    poolable = True  # over shared memory, may share a slot with steps never in flight at the same time

    def packing(self, step, mesh: Mesh, in_shape: tuple, dtype: np.dtype, mpi: bool) -> Packing:
        """The step's chunks and buffers (``mpi``: the MPI path's contiguous buffers)."""
        return Packing(subaxes.group_size(mesh, step.mesh_axes), np.dtype(dtype))

    def prepare(self, p, ex) -> bool:
        """Set up the program ``p`` on the executor ``ex``; True when it runs over shared memory."""
        p.comm = ex.sub(p.step.mesh_axes)
        use_shm = ex.use_shm(p.comm)
        self.adopt(p, ex.mesh, not use_shm)
        return use_shm

    def adopt(self, p, mesh: Mesh, mpi: bool) -> None:
        """Give ``p`` the step's packing and allocate its buffers."""
        pk = self.packing(p.step, mesh, p.in_shape, p.dtype, mpi)
        p.k, p.wide, p.chunks, p.send_chunks, p.order = pk.k, pk.wide, pk.chunks, pk.send_chunks, pk.order
        p.send = None if pk.send is None else np.empty(*pk.send)
        p.recv = None if pk.recv is None else np.empty(*pk.recv)

    def keeps_block(self, p) -> bool:
        """This rank's block is its output (nothing reaches it)."""
        return False

    def output(self, p, block: np.ndarray, out):
        if self.keeps_block(p):
            return block
        return p.new_out() if out is None else out

    def pack(self, p, block: np.ndarray, out: np.ndarray):
        """What the MPI call sends (the block, or ``p.send`` filled from it)."""
        return block

    @abstractmethod
    def issue(self, p, send, recv) -> list:
        """Start the MPI call; its requests."""

    @abstractmethod
    def call(self, p, send, recv) -> None:
        """The blocking MPI call."""

    def unpack(self, p, recv: np.ndarray, out: np.ndarray) -> None:
        p.chunks.unpack(recv, out)

    # -- shared memory (`shm_collectives.ShmStep`) ----------------------------------------------------------
    def shm_regions(self, p, k: int) -> tuple[int, int]:
        """Bytes per member of the step's first and second region: its input block, and none."""
        return int(np.prod(p.in_shape, dtype=np.int64)) * p.dtype.itemsize, 0

    def shm_sources(self, p):
        """The members whose regions this rank reads (None: all)."""
        return None

    def shm_readers(self, p):
        """The members that read this rank's region (None: all)."""
        return None

    def shm_in(self, p, shm, block: np.ndarray, mine: np.ndarray) -> None:
        """Copy this member's block into its region ``mine`` (typed, flat)."""
        np.copyto(mine, block.reshape(-1))

    def shm_out(self, p, shm, data: np.ndarray, out: np.ndarray, block: np.ndarray) -> None:
        """Fill ``out`` from the members' regions ``data`` ((k, bytes))."""
        raise RedistributionError(f"collective '{p.step.op}' has no shared-memory form: its Execution.prepare "
                                  "must not choose shared memory")


#: step class -> its execution (one entry per kind: :func:`executes`).
EXECUTIONS: dict[type, Execution] = {}


def executes(*step_classes):
    """Class decorator: the `Execution` subclass runs the steps of ``step_classes``."""
    def register(cls):
        for step_class in step_classes:
            EXECUTIONS[step_class] = cls()
        return cls
    return register


def execution(step) -> Execution:
    """The execution of ``step``'s kind."""
    found = EXECUTIONS.get(type(step))
    if found is None:
        raise RedistributionError(f"collective '{step.op}' has no execution: register one with "
                                  "slicer.runtime.collectives.collective_kinds.executes")
    return found


def mpi_scratch_bytes(step, mesh: Mesh, in_shape: tuple, dtype) -> int:
    """Bytes the MPI path allocates for ``step`` besides its input and output block (`slicer.viz.memory`)."""
    return execution(step).packing(step, mesh, tuple(in_shape), np.dtype(dtype), True).scratch_bytes()


def mpi_type(dtype: np.dtype):
    """The predefined MPI datatype that reductions of ``dtype`` use."""
    MPI = _mpi()
    types = {"f4": MPI.FLOAT, "f8": MPI.DOUBLE, "i1": MPI.INT8_T, "i2": MPI.INT16_T, "i4": MPI.INT32_T,
             "i8": MPI.INT64_T, "b1": MPI.C_BOOL}
    name = f"{dtype.kind}{dtype.itemsize}"
    if name not in types:
        raise RedistributionError(f"no MPI reduction for element type {dtype}: reductions support bf16, f16, f32, "
                                  "f64, i1 (bool), i8, i16, i32 and i64")
    return types[name]


def typed_rows(rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """A (k, nbytes) byte view with rows `stride` apart, as a (k, elements) array of `dtype`."""
    return rows.view(dtype).reshape((rows.shape[0], -1))


def combine(how, rows: np.ndarray, out: np.ndarray) -> None:
    """`out` = the rows combined in order (a sum or a maximum), as the simulator does: a sum of a narrow float
    (f16, bf16) accumulates in f32 and rounds once (`dtypes.accumulation_dtype`, `dtypes.sum_blocks`)."""
    if how is np.add and dtypes.accumulation_dtype(out.dtype) != out.dtype:
        dtypes.sum_into(rows, out)
    else:
        how.reduce(rows, axis=0, out=out)


def _out_shape(step, mesh: Mesh) -> tuple:
    return tuple(step.type_after.local_shape(mesh))


@executes(AllSlice)
class SliceExecution(Execution):
    """A local copy of this rank's chunk: no communication."""

    def packing(self, step, mesh, in_shape, dtype, mpi):
        pk = super().packing(step, mesh, in_shape, dtype, mpi)
        pk.chunks = Chunks(in_shape, step.slice_dim, pk.k, dtype)
        return pk

    def prepare(self, p, ex) -> bool:
        p.comm = None
        self.adopt(p, ex.mesh, True)
        p.index = ex.group_index(p.step.mesh_axes)
        return False

    def pack(self, p, block, out):
        p.chunks.copy_chunk(block, p.index, out)
        return None

    def issue(self, p, send, recv) -> list:
        return []

    def call(self, p, send, recv) -> None:
        pass


@executes(AllGather)
class GatherExecution(Execution):
    """``Allgather`` of the blocks, unpacked into the gathered dim."""

    def packing(self, step, mesh, in_shape, dtype, mpi):
        pk = super().packing(step, mesh, in_shape, dtype, mpi)
        pk.chunks = Chunks(_out_shape(step, mesh), step.gather_dim, pk.k, dtype)
        if mpi and not pk.chunks.contiguous:
            pk.recv = (pk.chunks.packed_shape, dtype)
        return pk

    def issue(self, p, send, recv) -> list:
        return [p.comm.Iallgather([send, _mpi().BYTE], [recv, _mpi().BYTE])]

    def call(self, p, send, recv) -> None:
        p.comm.Allgather([send, _mpi().BYTE], [recv, _mpi().BYTE])

    def shm_out(self, p, shm, data, out, block) -> None:
        p.chunks.unpack_rows(typed_rows(data, p.dtype), out)  # member j's block = chunk j of out


@executes(AllToAll)
class AllToAllExecution(Execution):
    """``Alltoall`` of the chunks of the split dim (a reordering one packs them in its receivers' order)."""

    def packing(self, step, mesh, in_shape, dtype, mpi):
        pk = super().packing(step, mesh, in_shape, dtype, mpi)
        pk.send_chunks = Chunks(in_shape, step.split_dim, pk.k, dtype)
        pk.chunks = Chunks(_out_shape(step, mesh), step.concat_dim, pk.k, dtype)
        if step.reordering:  # member j gets chunk order[j] of the split dim
            order = communicators.chunk_order(mesh, step.mesh_axes, step.split_order)
            pk.order = None if order == list(range(pk.k)) else order
        if mpi and (not pk.send_chunks.contiguous or pk.order is not None):
            pk.send = (pk.send_chunks.packed_shape, dtype)
        if mpi and not pk.chunks.contiguous:
            pk.recv = (pk.chunks.packed_shape, dtype)
        return pk

    def pack(self, p, block, out):
        if p.send is None:
            return block
        p.send_chunks.pack(block, p.send, order=p.order)
        return p.send

    def issue(self, p, send, recv) -> list:
        return [p.comm.Ialltoall([send, _mpi().BYTE], [recv, _mpi().BYTE])]

    def call(self, p, send, recv) -> None:
        p.comm.Alltoall([send, _mpi().BYTE], [recv, _mpi().BYTE])

    def shm_in(self, p, shm, block, mine) -> None:
        chunks, me = p.send_chunks, shm.me  # every chunk but this rank's own, which shm_out copies directly
        if p.order is not None:  # a reordering all-to-all: member j reads chunk order[j]
            chunks.pack(block, mine.reshape(chunks.packed_shape), skip=me, order=p.order)
        elif chunks.contiguous:
            flat, c = block.reshape(-1), block.size // shm.k
            np.copyto(mine[:me * c], flat[:me * c])
            np.copyto(mine[(me + 1) * c:], flat[(me + 1) * c:])
        else:
            chunks.pack(block, mine.reshape(chunks.packed_shape), skip=me)

    def shm_out(self, p, shm, data, out, block) -> None:
        g, c = shm.me, shm.nbytes // shm.k
        rows = data[:, g * c:(g + 1) * c]  # chunk g of every other member's packed block
        p.chunks.unpack_rows(typed_rows(rows, p.dtype), out, skip=g)
        own = g if p.order is None else p.order[g]
        copy_runs(p.chunks.chunk_view(out, g), p.send_chunks.chunk_view(block, own))


@executes(Permute)
class PermuteExecution(Execution):
    """Point to point: ``Isend`` to the receiver, ``Irecv`` from the sender; unmoved ranks keep their block.
    MPI copies once (CMA) and syncs only the pair: faster than shared memory's two copies, so shared memory only
    when the strategy is "shm"."""

    poolable = False  # its members read only their source

    def packing(self, step, mesh, in_shape, dtype, mpi):
        return Packing(1, np.dtype(dtype))

    def prepare(self, p, ex) -> bool:
        self.adopt(p, ex.mesh, True)
        p.comm = ex.cart
        p.target = p.source = None
        pairs = p.step.pair_array
        sends = np.nonzero(pairs[:, 0] == ex.rank)[0]
        receives = np.nonzero(pairs[:, 1] == ex.rank)[0]
        if sends.size:
            p.target = int(pairs[sends[0], 1])
        if receives.size:
            p.source = int(pairs[receives[0], 0])
        return ex.strategy == "shm" and ex.use_shm(p.comm)

    def keeps_block(self, p) -> bool:
        return p.source is None  # not moved: the block stays

    def issue(self, p, send, recv) -> list:
        if p.source is None:
            return []
        MPI = _mpi()
        return [p.comm.Irecv([recv, MPI.BYTE], source=p.source, tag=PERMUTE_TAG),
                p.comm.Isend([send, MPI.BYTE], dest=p.target, tag=PERMUTE_TAG)]

    def call(self, p, send, recv) -> None:
        if p.source is not None:
            MPI = _mpi()
            p.comm.Sendrecv([send, MPI.BYTE], dest=p.target, sendtag=PERMUTE_TAG,
                            recvbuf=[recv, MPI.BYTE], source=p.source, recvtag=PERMUTE_TAG)

    def shm_sources(self, p):
        return [p.source] if p.source is not None else []

    def shm_readers(self, p):
        return [p.target] if p.target is not None else []

    def shm_out(self, p, shm, data, out, block) -> None:
        if p.source is not None:
            np.copyto(out.reshape(-1), data[p.source].view(p.dtype))


class _ReduceExecution(Execution):
    """Sums over MPI travel in ``wide`` (`dtypes.accumulation_dtype`: MPI has no f16 or bf16 type), summed by
    MPI's own SUM, rounded once on the way out. Chosen over a user-defined MPI.Op summing bf16 bytes in f32:
    that one rounds at every combine of more than 2 members and was slower. Bool sums are logical ors (numpy's sum
    in bool). Shared
    memory sums in the block's dtype (f16/bf16 in f32, rounded once), as the simulator."""

    def packing(self, step, mesh, in_shape, dtype, mpi):
        pk = super().packing(step, mesh, in_shape, dtype, mpi)
        if mpi:
            pk.wide = np.dtype(dtypes.accumulation_dtype(dtype))
        return pk

    def prepare(self, p, ex) -> bool:
        use_shm = super().prepare(p, ex)
        if not use_shm:
            MPI = _mpi()
            p.mpi_type = mpi_type(p.wide)
            p.mpi_op = MPI.LOR if p.dtype == np.bool_ else {"sum": MPI.SUM, "max": MPI.MAX}[p.step.reduction]
        return use_shm

    def unpack(self, p, recv, out) -> None:
        np.copyto(out, recv, casting="unsafe")  # narrowing back from the wide type


@executes(AllReduce)
class AllReduceExecution(_ReduceExecution):
    """``Allreduce``; over shared memory a small block in one phase (every member combines every
    contribution), a large one in two (member j combines elements [j*c, (j+1)*c), then everyone gathers)."""

    def packing(self, step, mesh, in_shape, dtype, mpi):
        pk = super().packing(step, mesh, in_shape, dtype, mpi)
        if mpi and pk.wide != dtype:
            pk.send, pk.recv = (in_shape, pk.wide), (_out_shape(step, mesh), pk.wide)
        return pk

    def pack(self, p, block, out):
        if p.send is None:
            return block
        np.copyto(p.send, block)  # widening
        return p.send

    def issue(self, p, send, recv) -> list:
        return [p.comm.Iallreduce([send, p.mpi_type], [recv, p.mpi_type], op=p.mpi_op)]

    def call(self, p, send, recv) -> None:
        p.comm.Allreduce([send, p.mpi_type], [recv, p.mpi_type], op=p.mpi_op)

    def shm_regions(self, p, k: int) -> tuple[int, int]:
        count = int(np.prod(p.in_shape, dtype=np.int64))
        nbytes = count * p.dtype.itemsize
        return (nbytes, -(-count // k) * p.dtype.itemsize) if nbytes > SMALL_REDUCE else (nbytes, 0)

    def shm_out(self, p, shm, data, out, block) -> None:
        how = shm.combine
        if not shm.region2:
            combine(how, typed_rows(data, p.dtype), out.reshape(-1))
            return
        seg, g, k = shm.segment, shm.me, shm.k
        n, c = out.size, shm.region2 // p.dtype.itemsize
        lo, hi = min(g * c, n), min((g + 1) * c, n)
        mine2 = seg.mine2[:shm.region2].view(p.dtype)[: hi - lo]
        combine(how, typed_rows(data, p.dtype)[:, lo:hi], mine2)
        shm.second_phase()
        flat = out.reshape(-1)
        full = n // c  # members whose chunk is whole
        rows2 = typed_rows(seg.data2[:, :shm.region2], p.dtype)
        if full:
            np.copyto(flat[: full * c].reshape(full, c), rows2[:full, :c])
        if full < k and n > full * c:
            np.copyto(flat[full * c:], rows2[full, : n - full * c])


@executes(ReduceScatter)
class ReduceScatterExecution(_ReduceExecution):
    """``Reduce_scatter_block`` of the chunks of the scatter dim."""

    def packing(self, step, mesh, in_shape, dtype, mpi):
        pk = super().packing(step, mesh, in_shape, dtype, mpi)
        pk.send_chunks = Chunks(in_shape, step.scatter_dim, pk.k, dtype)
        if mpi and (not pk.send_chunks.contiguous or pk.wide != dtype):
            pk.send = (pk.send_chunks.packed_shape, pk.wide)
        if mpi and pk.wide != dtype:
            pk.recv = (_out_shape(step, mesh), pk.wide)
        return pk

    def pack(self, p, block, out):
        if p.send is None:
            return block
        if p.send_chunks.contiguous:
            np.copyto(p.send.reshape(p.in_shape), block)  # widening only
        elif p.wide != p.dtype:  # widening and packing at once (element-wise strided copy)
            view = block.reshape(p.send_chunks.outer, p.k, p.send_chunks.inner).transpose(1, 0, 2)
            np.copyto(p.send.reshape(view.shape), view)
        else:
            p.send_chunks.pack(block, p.send)
        return p.send

    def issue(self, p, send, recv) -> list:
        return [p.comm.Ireduce_scatter_block([send, p.mpi_type], [recv, p.mpi_type], op=p.mpi_op)]

    def call(self, p, send, recv) -> None:
        p.comm.Reduce_scatter_block([send, p.mpi_type], [recv, p.mpi_type], op=p.mpi_op)

    def shm_in(self, p, shm, block, mine) -> None:
        if p.send_chunks.contiguous:
            np.copyto(mine, block.reshape(-1))
        else:
            p.send_chunks.pack(block, mine.reshape(p.send_chunks.packed_shape))

    def shm_out(self, p, shm, data, out, block) -> None:
        g, c = shm.me, shm.nbytes // shm.k
        combine(np.add, typed_rows(data[:, g * c:(g + 1) * c], p.dtype), out.reshape(-1))
