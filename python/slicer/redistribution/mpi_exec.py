"""MPI executor: runs a plan on real ranks with mpi4py, one block per rank.

Communicators are built once per mesh: a Cartesian communicator over ``mesh.shape`` (no reordering, so
Cartesian rank = linear device rank, row-major as everywhere in Slicer) and, lazily, one sub-communicator
per group of mesh axes, split so that the sub-rank equals the device's group index over the axes (major to
minor; ``Cart_sub`` would impose mesh order instead). Each collective maps to one MPI call on that group:
all_gather -> ``Allgather``, all_to_all -> ``Alltoall``, permute -> ``Sendrecv``, all_reduce ->
``Allreduce``, reduce_scatter -> ``Reduce_scatter_block``; all_slice is a local copy. Gathers and
all-to-alls along non-leading dims use strided MPI datatypes, so data goes straight from the input block
into the output block (live memory = input + output, as the cost model says); only reduce_scatter along a
non-leading dim packs its input once. Nothing is ever gathered to one rank.

mpi4py is imported lazily so that the rest of the package works without MPI.
"""

from __future__ import annotations

import numpy as np

from . import communicators, subaxes
from .collectives import AllGather, AllReduce, AllSlice, AllToAll, Permute, ReduceScatter, Step
from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh
from .types import DistType


def _mpi():
    from mpi4py import MPI
    return MPI


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


class MeshExecutor:
    """Executes plans on ``comm`` (size must equal ``mesh.device_count``); reuse it for many plans."""

    def __init__(self, mesh: Mesh, comm=None):
        MPI = _mpi()
        comm = comm if comm is not None else MPI.COMM_WORLD
        if comm.Get_size() != mesh.device_count:
            raise RedistributionError(
                f"the communicator has {comm.Get_size()} ranks but the mesh {mesh} has {mesh.device_count} "
                f"devices: run with mpiexec -n {mesh.device_count}")
        self.mesh = mesh
        self.cart = comm.Create_cart(list(mesh.shape), periods=[False] * mesh.ndim, reorder=False)
        self.rank = self.cart.Get_rank()
        self.coords = dict(zip(mesh.axis_names, mesh.coords(self.rank)))
        self._subs: dict = {}
        self._types: dict = {}

    # -- communicators ------------------------------------------------------------------------------------
    def group_index(self, axes: tuple[str, ...]) -> int:
        return communicators.group_index(self.mesh, self.coords, axes)

    def sub(self, axes: tuple[str, ...]):
        """The communicator of this rank's group over ``axes`` (axes or sub-axes, see `communicators`); its
        rank is the group index."""
        comm = self._subs.get(axes)
        if comm is None:
            color, key = communicators.color_key(self.mesh, self.coords, axes)
            comm = self.cart.Split(color=color, key=key)
            self._subs[axes] = comm
        return comm

    def close(self) -> None:
        for comm in self._subs.values():
            comm.Free()
        self._subs.clear()
        for t in self._types.values():
            t.Free()
        self._types.clear()
        self.cart.Free()

    # -- datatypes ----------------------------------------------------------------------------------------
    def _base(self, dtype: np.dtype):
        from mpi4py.util.dtlib import from_numpy_dtype
        try:
            return from_numpy_dtype(dtype)
        except (KeyError, ValueError, TypeError):
            MPI = _mpi()  # e.g. float16 without an MPI type: move it as same-size integers
            return {1: MPI.UINT8_T, 2: MPI.UINT16_T, 4: MPI.UINT32_T, 8: MPI.UINT64_T}[dtype.itemsize]

    def _slab(self, dtype: np.dtype, outer: int, block: int, stride: int):
        """``outer`` runs of ``block`` elements ``stride`` apart, with extent ``block`` (cached)."""
        key = (dtype.str, outer, block, stride)
        t = self._types.get(key)
        if t is None:
            base = self._base(dtype)
            t = base.Create_vector(outer, block, stride).Create_resized(0, block * dtype.itemsize)
            t.Commit()
            self._types[key] = t
        return t

    # -- execution ----------------------------------------------------------------------------------------
    def run(self, plan, block: np.ndarray) -> np.ndarray:
        """Execute every step of ``plan`` on this rank's source block; returns its target block."""
        expected = plan.src.local_shape(plan.mesh)
        if block.shape != expected:
            raise RedistributionError(f"rank {self.rank}: block of shape {block.shape}, type {plan.src} needs "
                                      f"{expected}")
        block = np.require(block, requirements="C")
        steps = plan.steps
        for i, (step, before) in enumerate(zip(steps, plan.trace.types)):
            if isinstance(step, AllSlice) and i + 1 < len(steps) and isinstance(steps[i + 1], AllSlice):
                # a run of local slices is one view of the block, copied once at the end of the run
                block = np.split(block, subaxes.group_size(self.mesh, step.mesh_axes), axis=step.slice_axis)[
                    self.group_index(step.mesh_axes)]
                continue
            block = self.step(step, before, block)
        return block

    def step(self, step: Step, before: DistType, block: np.ndarray) -> np.ndarray:
        after_shape = step.type_after.local_shape(self.mesh)
        if isinstance(step, Permute):
            return self._permute(step, block)
        axes = step.mesh_axes
        k = subaxes.group_size(self.mesh, axes)
        if isinstance(step, AllSlice):
            chunk = np.split(block, k, axis=step.slice_axis)[self.group_index(axes)]
            return np.ascontiguousarray(chunk)
        comm = self.sub(axes)
        out = np.empty(after_shape, dtype=block.dtype)
        if isinstance(step, AllGather):
            d = step.gather_axis
            outer, inner = _prod(block.shape[:d]), _prod(block.shape[d:])
            if outer == 1:
                comm.Allgather(block, out)
            else:
                rtype = self._slab(block.dtype, outer, inner, k * inner)
                comm.Allgather(block, [out, 1, rtype])
            return out
        if isinstance(step, AllToAll):
            e, d = step.split_axis, step.concat_axis
            s_outer = _prod(block.shape[:e])
            s_inner = _prod(block.shape[e:]) // k
            r_outer = _prod(after_shape[:d])
            r_inner = _prod(after_shape[d:]) // k
            stype = self._slab(block.dtype, s_outer, s_inner, k * s_inner)
            rtype = self._slab(block.dtype, r_outer, r_inner, k * r_inner)
            if step.split_order != axes:  # reordering: member j gets the chunk at its index over split_order
                order = communicators.chunk_order(self.mesh, axes, step.split_order)
                comm.Alltoallv([block, ([1] * k, order), stype], [out, ([1] * k, list(range(k))), rtype])
                return out
            comm.Alltoall([block, 1, stype], [out, 1, rtype])
            return out
        if isinstance(step, AllReduce):
            return self._reduce(comm, block, out, scatter=False)
        if isinstance(step, ReduceScatter):
            d = step.scatter_axis
            outer = _prod(block.shape[:d])
            send = block
            if outer != 1:  # chunks of the scatter dim must be contiguous: pack once
                send = np.ascontiguousarray(np.moveaxis(block.reshape(outer, k, -1), 1, 0))
            return self._reduce(comm, send, out, scatter=True)
        raise RedistributionError(f"unknown step {step!r}")  # pragma: no cover

    def _reduce(self, comm, send: np.ndarray, out: np.ndarray, *, scatter: bool) -> np.ndarray:
        MPI = _mpi()
        if send.dtype == np.float16:  # MPI has no portable half-precision sum: reduce in f32
            wide = np.empty(out.shape, dtype=np.float32)
            self._reduce(comm, send.astype(np.float32), wide, scatter=scatter)
            out[...] = wide
            return out
        if scatter:
            comm.Reduce_scatter_block(send, out, op=MPI.SUM)
        else:
            comm.Allreduce(send, out, op=MPI.SUM)
        return out

    def _permute(self, step: Permute, block: np.ndarray) -> np.ndarray:
        target = source = None
        for s, d in step.pairs:
            if s == self.rank:
                target = d
            if d == self.rank:
                source = s
        if source is None:  # not moved: keep the block
            return block
        out = np.empty_like(block)
        self.cart.Sendrecv(block, dest=target, sendtag=7, recvbuf=out, source=source, recvtag=7)
        return out
