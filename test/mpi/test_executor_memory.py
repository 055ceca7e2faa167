"""What a rank keeps between runs: not the collectives' output blocks. A gathered weight (ZeRO-3 / FSDP) is a new
block at every run, dropped after its last use as the kernel graph counts it; a rank that kept one output block
per collective held every layer's whole weight at once, which the memory budget of `slicer.auto` assumes it does
not (the GPT training step on 2 ranks: 51-76 MiB per rank). Collectives never in flight together share their
shared-memory segments."""

import json
import sys
from pathlib import Path

import slicer
from example_modules import THREE_LAYERS, ZERO3
from slicer.lowering.kernel_graph import CollectiveNode
from slicer.runtime.jobs.mpiexec import run_spmd

WORKER = Path(__file__).with_name("executor_memory_worker.py")


def test_a_rank_keeps_no_gathered_weight_between_runs(tmp_path):
    prog = slicer.compile(THREE_LAYERS, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(ZERO3))
    graph = prog.graph
    gathered = [graph.value_bytes(n.output) for n in graph.nodes if isinstance(n, CollectiveNode)]
    assert len(gathered) == 3 and min(gathered) == 256 * 256 * 4
    path = tmp_path / "graph.json"
    path.write_text(graph.to_json())
    done = run_spmd(2, [sys.executable, str(WORKER), str(path)], timeout=240)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # what it may keep: its packing buffers and kernels' slots, far below one gathered weight (256 KiB)
    assert report["largest"] < min(gathered), report
    assert report["values"] == [256.0 ** 3]  # ones through three 256-wide products


def test_collectives_never_in_flight_together_share_their_shared_memory(tmp_path):
    """The schedule starts each all_gather at most one kernel ahead (`executor.schedule`): the first layer's and
    the last layer's are never in flight together, so they share one slot of shared memory (over MPI, without
    shared memory, nothing is pooled)."""
    prog = slicer.compile(THREE_LAYERS, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics(ZERO3))
    path = tmp_path / "graph.json"
    path.write_text(prog.graph.to_json())
    for strategy, slots in (("shm", 2), ("mpi", 0)):
        done = run_spmd(2, [sys.executable, str(WORKER), str(path)], timeout=240, env={"SLICER_COLLECTIVES": strategy})
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report["collectives"] == 3 and report["shared_slots"] == slots, report
        assert report["values"] == [256.0 ** 3]
