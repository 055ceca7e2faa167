"""Runs under mpiexec: a kernel graph (JSON, argv[1]) run twice by `RankExecutor` on this rank's blocks of ones;
then, its results dropped, rank 0 prints one JSON line: the bytes of the numpy arrays the executor still reaches
(of its own memory: shared-memory segments aside) and the largest of them, the distinct values of the results, and
how many collectives run over shared memory in how many slots."""

import gc
import json
import sys
from pathlib import Path

import numpy as np
from mpi4py import MPI

from slicer.lowering import KernelGraph
from slicer.runtime.execution.executor import RankExecutor


def reachable_arrays(root) -> list[np.ndarray]:
    """The distinct numpy arrays owning their memory that `root` reaches through its attributes, containers and
    bound objects."""
    seen, found, stack = set(), {}, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, str, bytes, int, float)):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            while isinstance(obj.base, np.ndarray):
                obj = obj.base
            if obj.flags.owndata:  # (not a view of an MPI shared-memory window: the collectives' segments)
                found[id(obj)] = obj
            continue
        stack.extend(gc.get_referents(obj))
    return list(found.values())


def main() -> None:
    graph = KernelGraph.from_json(Path(sys.argv[1]).read_text())
    comm = MPI.COMM_WORLD
    executor = RankExecutor(graph, comm)
    blocks = [np.ones(graph.values[a].local_shape, graph.values[a].numpy_dtype) for a in graph.args]
    values = set()
    for _ in range(2):
        results, _ = executor.run(blocks)
        values |= {float(v) for r in results for v in np.unique(r)}
    del results
    arrays = [a for a in reachable_arrays(executor) if a.nbytes >= 1024]
    slots = {id(p.shm.slot) for p in executor.programs.values() if p.shm is not None}
    report = {"held": sum(a.nbytes for a in arrays), "largest": max((a.nbytes for a in arrays), default=0),
              "values": sorted(values), "collectives": len(executor.programs), "shared_slots": len(slots),
              "over_shared_memory": sum(p.shm is not None for p in executor.programs.values())}
    executor.close()
    if comm.Get_rank() == 0:
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
