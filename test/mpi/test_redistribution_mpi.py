"""The MPI executor matches the whole-mesh simulator on 4 and 8 ranks for every benchmark-suite case
(our plans and the naive ones, several dtypes; sub-axes in the types and in the plans, reordering
all-to-alls), on random reshards with sub-axes (the plans of both objectives), and on 2, 4 and 8 ranks for
every step kind on random layouts, over shared memory and over MPI. Runs the workers under mpiexec with a
timeout."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from slicer.lowering import build_kernel_graph
from slicer.passes import transform
from slicer.runtime.jobs.launch import launch
from slicer.runtime.jobs.mpiexec import spmd_command

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "redistribution"))
from test_subaxes import SPMD_CASES, reshard_program

WORKER = Path(__file__).with_name("redistribution_worker.py")
RANDOM = 40  # random reshards with sub-axes per rank count


def run_workers(ranks: int, argv: list[str], timeout: float, **env: str) -> subprocess.CompletedProcess:
    """`argv` on `ranks` ranks, started as the launcher starts a job (`spmd_command`: mpich's mpiexec, which is
    a dependency, so a missing one fails the test; oversubscribed ranks wait sleeping; one BLAS thread each)."""
    command, environment = spmd_command(ranks, [sys.executable, *argv], env=env)
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=environment)


@pytest.mark.parametrize("ranks", [4, 8])
@pytest.mark.slow
def test_mpi_executor_matches_simulator(ranks):
    proc = run_workers(ranks, [str(WORKER), "--bytes", str(1 << 14), "--random", str(RANDOM)], timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ranks"] == ranks
    results = report["results"]
    assert len(results) == 2 * 4 * 16 + 2 * RANDOM  # ours + naive, 4 dtypes, 16 cases; random: both objectives
    assert sum(r.get("sub_axes", False) for r in results) >= RANDOM // 2  # most random plans use sub-axes
    bad = [r for r in results if not (r["matches_simulator"] and r["correct"])]
    assert not bad, bad


STEP_WORKER = Path(__file__).with_name("step_kinds_worker.py")


@pytest.mark.parametrize("strategy", ["shm", "mpi"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
@pytest.mark.slow
def test_every_step_kind_matches_simulator(ranks, strategy):
    """Every step kind on random non-contiguous layouts, odd sizes and 6 dtypes: blocking, nonblocking (all
    in flight at once) and with reused buffers, bit for bit against the simulator; blocks over 64 KiB with
    float sums (bit for bit over shared memory, which sums in the simulator's order; close over MPI; the
    same bits on every rank either way). Both transports: shared memory and MPI."""
    # Random cases per kind, mesh and dtype: 3 on 4 and 8 ranks (oversubscribed, every case waits on all of
    # them: 12 s of the suite for 6), 6 on 2 and in the nightly run (SLICER_NIGHTLY=1).
    cases = 6 if ranks == 2 or os.environ.get("SLICER_NIGHTLY") == "1" else 3
    proc = run_workers(ranks, [str(STEP_WORKER), "--cases", str(cases)], timeout=180, SLICER_COLLECTIVES=strategy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    expected_kinds = {"all_gather", "all_to_all", "all_slice", "all_reduce", "reduce_scatter", "permute"}
    if ranks == 2:  # a 1-axis mesh has no permutes (no two equal axes to swap)
        expected_kinds.discard("permute")
    assert set(report["kinds"]) == expected_kinds
    assert report["cases"] >= 100
    assert not report["failures"], report["failures"][:10]


@pytest.mark.parametrize("name", ["subaxes", "reorder"])
def test_partitioned_sub_axes_on_8_ranks(name, tmp_path):
    """The emitted IR of a plan over sub-axes (a grid refining the mesh) and of a reordering all-to-all
    (`slicer.all_to_all`), read back into a kernel graph and run on 8 MPI ranks, returns its input."""
    mesh, shape, src, dst, marker = SPMD_CASES[name]
    spmd = transform(reshard_program(mesh, shape, src, dst), "slicer-partition")
    assert marker in spmd
    data = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    np.save(tmp_path / "input0.npy", data)
    (result,), _ = launch(build_kernel_graph(spmd), 8, inputs=[str(tmp_path / "input0.npy")], timeout=240)
    np.testing.assert_array_equal(result, data)
