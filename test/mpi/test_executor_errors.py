"""The MPI executor's bad inputs are RedistributionErrors that say what to do (one process, COMM_SELF)."""

import numpy as np
import pytest
from mpi4py import MPI

from slicer.redistribution import DistType, Mesh, RedistributionError, plan
from slicer.runtime.collectives.plan_executor import MeshExecutor


def test_unknown_strategy_names_the_choices():
    with pytest.raises(RedistributionError, match="strategy 'fast': use 'auto', 'mpi' or 'shm'"):
        MeshExecutor(Mesh(x=1), MPI.COMM_SELF, strategy="fast")


def test_communicator_of_the_wrong_size():
    with pytest.raises(RedistributionError, match="run with mpiexec -n 2"):
        MeshExecutor(Mesh(x=2), MPI.COMM_SELF)


@pytest.mark.parametrize("strategy", ["auto", "mpi", "shm"])
def test_block_of_the_wrong_shape(strategy):
    mesh = Mesh(x=1)
    ex = MeshExecutor(mesh, MPI.COMM_SELF, strategy=strategy)
    p = plan(mesh, DistType.parse("[[x],[]]", (4, 4), mesh), DistType.parse("[[],[x]]", (4, 4), mesh))
    with pytest.raises(RedistributionError, match=r"block of shape \(2, 4\), type \[\[x\],\[\]\] needs \(4, 4\)"):
        ex.run(p, np.zeros((2, 4), np.float32))
    assert np.array_equal(ex.run(p, np.ones((4, 4), np.float32)), np.ones((4, 4), np.float32))
    ex.close()
