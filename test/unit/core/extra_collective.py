"""A collective kind the package does not have, defined and registered in this one module: `GatherSum`, an
all-reduce that all-gathers every member's block and sums them in group order on every member (so its sums are
the simulator's bits over MPI too, unlike `MPI_Allreduce`'s). Its class carries the typing rule, cost, numpy
semantics and IR form; `GatherSumExecution` how it runs over MPI and shared memory; `IRDL` its op. `registered()`
puts all three in the package's tables (and takes them out after); nothing else in the package names it.
Used by test_collective_owners.py and, on real ranks, by test/mpi/extra_collective_worker.py."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from slicer.core import dtypes
from slicer.core.names import GRID_AXES_ATTR
from slicer.dialect import loader
from slicer.redistribution import collective
from slicer.redistribution import step_rules as rules
from slicer.redistribution.collective import Collective, register
from slicer.redistribution.types import DistType
from slicer.runtime.collectives import collective_kinds
from slicer.runtime.collectives.collective_kinds import Execution, executes, typed_rows
from slicer.spmd import emit_collectives

OP_NAME = "slicer_test.gather_sum"

IRDL = f"""
irdl.dialect @slicer_test {{
  irdl.operation @gather_sum {{
    %src = irdl.base "!builtin.tensor"
    %res = irdl.base "!builtin.tensor"
    irdl.operands(source: %src)
    irdl.results(result: %res)
    %grid = irdl.base "#builtin.symbol_ref"
    %axes = irdl.base "#builtin.dense_array"
    irdl.attributes {{"grid" = %grid, "{GRID_AXES_ATTR}" = %axes}}
  }}
}}
"""


@dataclass(frozen=True)
class GatherSum(Collective):
    """Sum over the group over the partial axes ``mesh_axes`` (which stop being partial), every member
    receiving every other member's whole block."""
    mesh_axes: tuple[str, ...]
    type_after: DistType
    op: ClassVar[str] = "gather_sum"
    phase: ClassVar[int | None] = None
    ir_name: ClassVar[str] = OP_NAME
    reduces: ClassVar[bool] = True

    def rule(self, before, mesh, layout=None):
        rules.check_axes(mesh, self.mesh_axes, self.op)
        return DistType(before.shape, before.dims, rules.without_partial(mesh, before, self.mesh_axes, self.op))

    def inverse(self, dims: list, partial: list) -> bool:
        partial += self.mesh_axes
        return True

    def numpy_group(self, layout, row, blocks: list) -> list:
        total = dtypes.sum_blocks(blocks)
        return [total] * len(row)

    @staticmethod
    def busiest(k: int, local: int) -> int:
        return (k - 1) * local


class GatherSumExecution(Execution):
    """Over MPI: ``Allgather`` of the blocks into a (k, block) buffer, summed in group order; over shared
    memory: every member sums every member's region."""

    def packing(self, step, mesh, in_shape, dtype, mpi):
        pk = super().packing(step, mesh, in_shape, dtype, mpi)  # the blocks travel as they are: the sum is local
        if mpi:
            pk.recv = ((pk.k, *in_shape), dtype)
        return pk

    def issue(self, p, send, recv) -> list:
        from mpi4py import MPI
        return [p.comm.Iallgather([send, MPI.BYTE], [recv, MPI.BYTE])]

    def call(self, p, send, recv) -> None:
        from mpi4py import MPI
        p.comm.Allgather([send, MPI.BYTE], [recv, MPI.BYTE])

    def unpack(self, p, recv, out) -> None:
        np.copyto(out, dtypes.sum_blocks(list(recv)))

    def shm_out(self, p, shm, data, out, block) -> None:
        rows = typed_rows(data, p.dtype).reshape((shm.k, *p.in_shape))
        np.copyto(out, dtypes.sum_blocks(list(rows)))


def register_everywhere() -> None:
    """The one place the kind joins the package: its class, its execution, its op."""
    register(GatherSum)
    executes(GatherSum)(GatherSumExecution)
    loader.add_definition(IRDL)


@contextmanager
def registered():
    """`GatherSum` registered for the duration (the package's tables restored after)."""
    tables = (collective.STEP_TYPES, collective.STEP_OF_IR, collective_kinds.EXECUTIONS, emit_collectives.EMISSIONS)
    saved = [dict(table) for table in tables]
    register_everywhere()
    try:
        yield GatherSum
    finally:
        for table, before in zip(tables, saved, strict=True):
            table.clear()
            table.update(before)
