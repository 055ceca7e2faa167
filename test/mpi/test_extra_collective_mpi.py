"""A collective kind registered in one place (test/unit/core/extra_collective.py) runs on 2 real ranks, over
MPI and over shared memory: a kernel graph holding it, by the rank executor, gives the simulator's bits, and the
step alone matches the simulator's step bit for bit; the run's timeline (its Chrome trace) shows it. (Its emission,
kernel graph, simulator, report and pictures: test/unit/core/test_collective_owners.py.)"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from slicer.lowering import build_kernel_graph
from slicer.runtime.simulation.simulator import Simulator

sys.path.insert(0, str(Path(__file__).parents[1] / "unit" / "core"))
from extra_collective import registered
from test_collective_owners import _row_sums_with

sys.path.insert(0, str(Path(__file__).parent))
from test_redistribution_mpi import run_workers

WORKER = Path(__file__).with_name("extra_collective_worker.py")


@pytest.mark.parametrize("strategy", ["mpi", "shm"])
def test_a_new_kind_runs_on_real_ranks(strategy, tmp_path):
    a = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    with registered() as kind:
        _, spmd = _row_sums_with(kind)
        graph = build_kernel_graph(spmd)
        expected = Simulator(graph)(a)
    (tmp_path / "graph.json").write_text(graph.to_json())
    np.save(tmp_path / "a.npy", a)
    proc = run_workers(2, [str(WORKER), "--graph", str(tmp_path / "graph.json"), "--input", str(tmp_path / "a.npy")],
                       timeout=180, SLICER_COLLECTIVES=strategy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["cases"] == 24 and not report["failures"], report["failures"]
    np.testing.assert_array_equal(np.array(report["result"], dtype=np.float32), expected)
    assert {"gather_sum (start)", "gather_sum (wait)"} <= set(report["timeline"])  # the run's timeline shows it
