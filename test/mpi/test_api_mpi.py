"""The Python API on MPI: Program.run_in_mpi inside an existing job."""

import sys
from pathlib import Path

from slicer.runtime.jobs.mpiexec import run_spmd

HERE = Path(__file__).parent


def test_run_in_mpi_inside_an_mpiexec_job():
    done = run_spmd(4,
                    [sys.executable, str(HERE / "run_in_mpi_worker.py"),
                     str(HERE.parents[1] / "examples" / "mlp.mlir")],
                    timeout=240)
    assert done.returncode == 0, done.stderr
    error = float(done.stdout.split("max error")[1].split()[0])
    assert error < 1e-5
    # overlap not given: SLICER_OVERLAP's 'sometimes' is refused on every rank (no rank left waiting)
    for rank in range(4):
        assert f"rank {rank} refused: SLICER_OVERLAP='sometimes'" in done.stdout, done.stdout
