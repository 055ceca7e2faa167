"""Checkpoints of ranks on several hosts, with or without a file system they share.

Saving: each rank writes its blocks into the checkpoint's directory as its own host sees it (`write_here`:
the directory made there if needed) and records its host's name with each file; the manifest (written by the
driver, or rank 0 of the user's job, on its host) says which host holds which block. On a shared file system
every host sees every file, as on one host.

Loading (`read_across`, collective over the job's ranks): each rank needs the index ranges of its blocks
under the current layout. It reads from the saved blocks whose files it sees (their size and sha256 checked as
they are read); every other overlap comes over MPI from the lowest rank that sees that
file, which checks it and sends only the overlapping piece (one `alltoall` of the pieces). The problems found
on any rank (a file none sees, a checksum that does not match) are gathered first and every rank raises the
same CheckpointError before anything is sent, so the state of every rank stays as it was. On one shared file
system nothing crosses MPI: every rank reads its overlaps itself, as a single host does.
"""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np

from slicer.core import dtypes
from slicer.core.errors import CheckpointError

from .checkpoint import Checkpoint, overlap, write_block


def write_here(directory: str | Path, blocks: dict[str, tuple[np.ndarray, tuple[int, ...]]]) -> dict[str, dict]:
    """Write `blocks` (file -> (block, local shape)) into `directory` on this host; each file's record (size,
    sha256) with this host's name."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot write a checkpoint in '{directory}' on host {socket.gethostname()}: {exc}") \
            from None
    host = socket.gethostname()
    return {file: dict(write_block(directory, file, block, shape), host=host)
            for file, (block, shape) in blocks.items()}


def open_fitting(directory: str | Path, values) -> Checkpoint:
    """The checkpoint whose manifest is in `directory` (here), fitting `values`; its files are checked where they
    are read (`read_across`), on the hosts that hold them."""
    checkpoint = Checkpoint.open(directory)
    checkpoint.check_fits(values)
    return checkpoint


def _bounds(checkpoint: Checkpoint, name: str, slices) -> list[tuple[int, int]]:
    shape = checkpoint.values[name]["shape"]
    return [(s.start or 0, n if s.stop is None else s.stop) for s, n in zip(slices, shape, strict=True)]


def read_across(checkpoint: Checkpoint, comm,
                wanted: dict[int, tuple[str, tuple[slice, ...]]]) -> dict[int, np.ndarray]:
    """This rank's blocks `wanted` (argument -> (state name, index range)) of the (opened, fitting) checkpoint,
    collectively over `comm` (module docstring); CheckpointError on every rank alike if any rank found a problem."""
    checkpoint.check_coverage()
    rank = comm.Get_rank()
    blocks = {b["file"]: (name, b) for name, v in checkpoint.values.items() for b in v["blocks"]}
    every_seen = [set(files) for files in comm.allgather(sorted(f for f, (_, b) in blocks.items()
                                                                   if checkpoint.present(b)))]
    needed: dict[str, list[int]] = {}  # file -> the arguments of this rank it overlaps
    for arg, (name, slices) in wanted.items():
        for block in checkpoint.values[name]["blocks"]:
            if overlap(_bounds(checkpoint, name, slices), block) is not None:
                needed.setdefault(block["file"], []).append(arg)
    # what each rank asks of others: file -> [(argument, its index range)]
    asked = comm.allgather({f: [(arg, wanted[arg][1]) for arg in args] for f, args in needed.items()
                            if f not in every_seen[rank]})
    supplier = {f: next((r for r, files in enumerate(every_seen) if f in files), None) for f in blocks}
    checked = {f for f in needed if f in every_seen[rank]} | \
        {f for requests in asked for f in requests if supplier[f] == rank}
    problems = [f"rank {rank}: {p}" for f in sorted(checked) if (p := checkpoint.block_problem(*blocks[f]))]
    problems += [f"rank {r}: {_unseen(checkpoint, blocks[f][1])}" for r, requests in enumerate(asked)
                 for f in requests if supplier[f] is None]
    every_problem = [p for part in comm.allgather(problems[:1]) for p in part]
    if every_problem:
        raise CheckpointError(every_problem[0])
    outgoing: list[list] = [[] for _ in range(comm.Get_size())]
    for requester, requests in enumerate(asked):
        for file, pieces in requests.items():
            if supplier[file] == rank:
                name, block = blocks[file]
                data = checkpoint.load(name, block)
                for arg, slices in pieces:
                    hit = overlap(_bounds(checkpoint, name, slices), block)
                    if hit is None:  # a rank asks only for the blocks its arguments overlap
                        continue
                    source, target = hit
                    outgoing[requester].append((arg, target, np.ascontiguousarray(data[source])))
    incoming = comm.alltoall(outgoing)
    out = {}
    for arg, (name, slices) in wanted.items():
        bounds = _bounds(checkpoint, name, slices)
        out[arg] = np.empty(tuple(b - a for a, b in bounds), dtypes.parse_dtype(checkpoint.values[name]["dtype"]))
        for block in checkpoint.values[name]["blocks"]:
            where = overlap(bounds, block)
            if where is not None and block["file"] in every_seen[rank]:
                out[arg][where[1]] = checkpoint.load(name, block)[where[0]]
    for pieces in incoming:
        for arg, target, piece in pieces:
            out[arg][target] = piece
    return out


def _unseen(checkpoint: Checkpoint, block: dict) -> str:
    held = f"host {block['host']}" if block.get("host") else "the host that saved it"
    return (f"checkpoint '{checkpoint.directory}': block file '{block['file']}' is seen by no rank of this job: "
            f"the manifest says {held} holds it; run a rank there or copy the file")


__all__ = ["open_fitting", "read_across", "write_here"]
