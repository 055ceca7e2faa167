"""The programs a rank keeps loaded after it stops running them, so that switching back costs no load.

A live reshard (`Session.reshard`) or a lent job's next session replaces the program a rank runs. Loading a
program on a rank (its kernels found in the cache and opened, its collectives' buffers and communicators made)
costs far more than moving a small state (docs/runtime.md, "Train then serve"), and users switch back and forth
between the same few programs (train under FSDP, serve under Megatron, train again). So a rank does not close
the program it leaves: it keeps it here, without its state, and a later switch to the same program takes it
back. Programs are known by `program_key` (a digest of what the driver sends to load one); at most `capacity`
are kept, the least recently left closed first.

Every rank of a job receives the same requests in the same order, so every rank keeps the same programs and
evicts the same one at the same time: `close` of an evicted program is collective, and all ranks call it
together. The driver does not mirror this table: it asks the ranks whether they hold a program (`activate`
requests), and all ranks answer alike.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from slicer.core.errors import InternalError
from slicer.core.mesh import Mesh

from ..collectives.plan_executor import MeshExecutor
from ..execution.executor import RunOptions
from .reshard import Reshard, move_blocks
from .resident import ResidentRank

KEPT_PROGRAMS = 4  # programs a rank keeps loaded besides the one it runs (each holds its collectives' buffers)


def program_key(graph_json: str, feeds: Mapping[int, int], names: Sequence[str], options: RunOptions) -> str:
    """The key of a program as the driver sends it: its kernel graph (kernels included), what feeds what, its
    arguments' names and how its collectives run."""
    digest = hashlib.sha256(graph_json.encode())
    digest.update(json.dumps([sorted(feeds.items()), list(names), options.collectives, options.overlap]).encode())
    return digest.hexdigest()


class LoadedPrograms:
    """The program this rank runs (`running`, under `running_key`) and the ones it has left, by key, least
    recently left first (see the module docstring); and the executors that move state between them, one per
    mesh (`mover`), kept too: their communicators and the buffers of the plans they ran."""

    def __init__(self, capacity: int = KEPT_PROGRAMS):
        self.capacity = capacity
        self.running: ResidentRank | None = None
        self.running_key: str | None = None
        self._kept: OrderedDict[str, ResidentRank] = OrderedDict()
        self._movers: dict[Mesh, MeshExecutor] = {}

    def __contains__(self, key: str) -> bool:
        return key in self._kept or (self.running is not None and key == self.running_key)

    def __len__(self) -> int:
        return len(self._kept)

    def switch(self, key: str, program: ResidentRank | None = None) -> ResidentRank | None:
        """Run the program of `key`: `program` (just loaded), else the one kept under `key` (None if there is
        none: then nothing changes). The program running before is kept, without its state; beyond `capacity`
        the least recently kept is closed (collective: every rank switches and evicts alike)."""
        if program is None:
            program = self.running if key == self.running_key else self._kept.pop(key, None)
        if program is None:
            return None
        if self.running is not None and self.running is not program:
            self.running.resident.clear()
            self._kept[self.running_key or ""] = self.running
            self._kept.move_to_end(self.running_key or "")
        self.running, self.running_key = program, key
        self._evict()
        return program

    def keep(self, key: str, program: ResidentRank) -> None:
        """Keep `program` (just loaded, without state) under `key` for a later switch, as the most recently
        left; beyond `capacity` the least recently left is closed (collective, as `switch`)."""
        if key in self:
            raise InternalError("preload of a program this rank holds already")
        self._kept[key] = program
        self._evict()

    def _evict(self) -> None:
        while len(self._kept) > self.capacity:
            _, evicted = self._kept.popitem(last=False)
            evicted.close()

    def move_state(self, moves: Reshard, comm) -> dict:
        """The running program's state moved to the new layout of `moves` (collective), by new argument index;
        the running program is left without state (each old block freed once moved)."""
        if self.running is None:
            raise InternalError("reshard before a program was loaded")
        held = self.running.blocks([m.old for m in moves.moves])
        self.running.resident.clear()
        return move_blocks(self.mover(moves.mesh, comm), moves, held)

    def mover(self, mesh: Mesh, comm) -> MeshExecutor:
        """The executor of moves between layouts on `mesh` (made once per mesh: collective). It runs MPI's
        collectives, not shared memory: a move runs each of its plans once per switch, and a shared-memory
        program's segments cost more to make than the transfer they serve."""
        if mesh not in self._movers:
            self._movers[mesh] = MeshExecutor(mesh, comm, strategy="mpi")
        return self._movers[mesh]

    def close(self) -> None:
        """Close every program, running or kept, and the movers (collective)."""
        programs = [*self._kept.values(), *([self.running] if self.running is not None else [])]
        self._kept.clear()
        self.running, self.running_key = None, None
        for program in programs:
            program.close()
        for mover in self._movers.values():
            mover.close()
        self._movers.clear()


__all__ = ["KEPT_PROGRAMS", "LoadedPrograms", "program_key"]
