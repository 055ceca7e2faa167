"""Checkpoints of a session's state: each rank's blocks in `.npy` files and a manifest written last.

A training session's state (parameters, buffers, optimizer state: the program's state arguments, by name)
lives in blocks on the ranks. `save` has every rank write the blocks it holds, each distinct block once (a
value replicated over an axis is written by the lowest rank holding it), as `<arg>.<name>.r<rank>.npy`; each
file goes to a temporary name, is flushed to disk and renamed into place, and its size and sha256 go into
`manifest.json`, written the same way once every block is in place. The manifest records the format, the
step count, the mesh, and per value its name, dtype, global shape, distributed type and blocks (the rank that
wrote each, its global index range, file, size, sha256). A directory without a manifest is not a checkpoint,
nor is one whose files differ from it: `Checkpoint.open` + `verify` refuse both before anything is read.

Loading needs only the manifest and the block files, not the mesh or strategy that saved them: `read(name,
slices)` assembles any index range of a value from the saved blocks that overlap it (each through a memory
map, so a rank restoring its block reads only the bytes of that block), so a state saved under FSDP on x=4
loads under Megatron on y=2, data parallel, or one device.

Details: docs/module-notes.md, `runtime/state/checkpoint.py`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slicer.core import dtypes
from slicer.core.arrays import as_tensor
from slicer.core.errors import CheckpointError, SlicerError
from slicer.core.mesh import Mesh
from slicer.redistribution import DistType

from ..execution.blocks import rank_slices

MANIFEST = "manifest.json"
FORMAT = "slicer-checkpoint"
VERSION = 1


@dataclass(frozen=True)
class StateValue:
    """One state argument as a checkpoint records it: argument index, name, dtype, distributed type."""

    argument: int
    name: str
    dtype: np.dtype
    dist: DistType

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.dist.shape)


def block_file(value: StateValue, rank: int) -> str:
    """The file name of `rank`'s block of `value` (the argument index keeps names unique once sanitised)."""
    return f"{value.argument:03d}.{re.sub(r'[^A-Za-z0-9_.-]', '_', value.name)[:80]}.r{rank}.npy"


def writers(mesh: Mesh, value: StateValue) -> dict[int, tuple[slice, ...]]:
    """The ranks that write `value`'s blocks, each distinct block once (its lowest rank): rank -> its slices."""
    if value.dist.partial:
        raise CheckpointError(f"state '{value.name}' is a partial sum over {list(value.dist.partial)} "
                              f"({value.dist}): a checkpoint holds values, lay the state out without partial axes")
    chosen: dict[tuple, int] = {}
    for rank in range(mesh.device_count):
        key = tuple((s.start, s.stop) for s in rank_slices(mesh, value.dist, rank))
        chosen.setdefault(key, rank)
    return {rank: rank_slices(mesh, value.dist, rank) for rank in chosen.values()}


def save_jobs(mesh: Mesh, values: Sequence[StateValue]) -> list[dict[int, str]]:
    """What each rank writes: per rank, argument index -> file name."""
    jobs: list[dict[int, str]] = [{} for _ in range(mesh.device_count)]
    for value in values:
        for rank in writers(mesh, value):
            jobs[rank][value.argument] = block_file(value, rank)
    return jobs


def begin(directory: str | Path) -> Path:
    """Prepare `directory` for a checkpoint: created if needed; an older manifest there is removed first, so
    a save that stops half-way leaves a directory that is not a checkpoint rather than a mix of two."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / MANIFEST).unlink(missing_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot write a checkpoint in '{directory}': {exc}") from None
    return directory


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise CheckpointError(f"cannot write '{path}': {exc}") from None


def write_block(directory: str | Path, file: str, block: np.ndarray, shape: Sequence[int]) -> dict:
    """Write `block` with its local `shape` (a rank may hold a 0-d value as one element) as `directory/file`
    (temporary file, fsync, rename); its record: size and sha256."""
    buffer = io.BytesIO()
    np.save(buffer, np.require(np.reshape(block, tuple(shape)), requirements="C"), allow_pickle=False)
    data = buffer.getvalue()
    _write_atomically(Path(directory) / file, data)
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_manifest(directory: str | Path, mesh: Mesh, values: Sequence[StateValue], step: int,
                   records: Mapping[str, dict], placed: Mapping[str, Mapping[int, tuple]] | None = None) -> None:
    """Write the manifest, last: every value, its blocks (`records`: file -> size and sha256, from the
    writers) and the step count. `placed` (value name -> writing rank -> its slices) replaces `writers` where
    the ranks are not the mesh's own (a pipelined program's stages each hold their values on `mesh`)."""
    entries = []
    for value in values:
        blocks = []
        for rank, slices in (writers(mesh, value) if placed is None else placed[value.name]).items():
            file = block_file(value, rank)
            if file not in records:
                raise CheckpointError(f"block '{file}' of state '{value.name}' was not written (rank {rank})")
            blocks.append({"rank": rank, "start": [s.start for s in slices], "stop": [s.stop for s in slices],
                           "file": file, **records[file]})
        entries.append({"name": value.name, "argument": value.argument, "dtype": dtypes.dtype_text(value.dtype),
                        "shape": list(value.shape), "dist": str(value.dist), "blocks": blocks})
    manifest = {"format": FORMAT, "version": VERSION, "step": int(step), "mesh": str(mesh), "values": entries}
    _write_atomically(Path(directory) / MANIFEST, json.dumps(manifest, indent=1).encode())


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint directory whose manifest parses (`open`); `verify` checks every file against it."""

    directory: Path
    step: int
    mesh: str
    values: dict  # name -> the manifest's entry

    @classmethod
    def open(cls, directory: str | Path) -> Checkpoint:
        directory = Path(directory)
        path = directory / MANIFEST
        if not path.is_file():
            what = "does not exist" if not directory.exists() else f"has no {MANIFEST}"
            raise CheckpointError(f"'{directory}' {what}: it is not a checkpoint (a save that did not finish "
                                  "writes no manifest)")
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"'{path}' is not a readable checkpoint manifest: {exc}") from None
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
            raise CheckpointError(f"'{path}' is not a {FORMAT} manifest of version {VERSION}")
        try:
            mesh = Mesh.parse(manifest["mesh"])
            values = {v["name"]: v for v in manifest["values"]}
            for v in values.values():
                dtypes.parse_dtype(v["dtype"]), DistType.parse(v["dist"], [int(n) for n in v["shape"]], mesh)
                for b in v["blocks"]:
                    b["sha256"], int(b["bytes"]), list(b["start"]), list(b["stop"])
                    if Path(b["file"]).name != b["file"] or b["file"] in ("", ".", ".."):
                        raise CheckpointError(f"'{path}': block file {b['file']!r} of state '{v['name']}' is not a "
                                              "file name in the checkpoint's directory")
            return cls(directory, int(manifest["step"]), str(manifest["mesh"]), values)
        except CheckpointError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError, SlicerError) as exc:
            raise CheckpointError(f"'{path}' is not a valid checkpoint manifest: {type(exc).__name__}: {exc}") from None

    def verify(self) -> None:
        """CheckpointError unless every block file is there with its recorded size and sha256, and each value's
        blocks cover its shape."""
        self.check_coverage()
        for name, value in self.values.items():
            for block in value["blocks"]:
                problem = self.block_problem(name, block)
                if problem:
                    raise CheckpointError(problem)

    def check_coverage(self) -> None:
        """CheckpointError unless each value's blocks cover its shape (the manifest alone)."""
        for name, value in self.values.items():
            covered = sum(int(np.prod([b - a for a, b in zip(block["start"], block["stop"])], dtype=np.int64))
                          for block in value["blocks"])
            if covered != int(np.prod(value["shape"], dtype=np.int64)):
                raise CheckpointError(f"{self._where(name)}: its blocks hold {covered} elements, its shape "
                                      f"{value['shape']} has {int(np.prod(value['shape']))}")

    def block_problem(self, name: str, block: dict) -> str | None:
        """What is wrong with the file of `block` (of value `name`) here, or None: missing, another size, another
        sha256 than the manifest records."""
        path = self.directory / block["file"]
        if not path.is_file():
            held = f" (the manifest says host {block['host']} holds it)" if block.get("host") else ""
            return f"{self._where(name)}: block file '{path}' is missing{held}"
        size = path.stat().st_size
        if size != block["bytes"]:
            return (f"{self._where(name)}: block file '{path}' has {size} bytes, the manifest says {block['bytes']} "
                    "(truncated or rewritten)")
        if sha256_of(path) != block["sha256"]:
            return (f"{self._where(name)}: block file '{path}' does not match its sha256 in the manifest (changed or "
                    "corrupted since it was saved)")
        return None

    def present(self, block: dict) -> bool:
        """Whether `block`'s file is here (its size and content are checked where it is read)."""
        return (self.directory / block["file"]).is_file()

    def check_fits(self, values: Sequence[StateValue]) -> None:
        """CheckpointError unless this checkpoint holds exactly `values` (names, shapes, dtypes)."""
        want = {v.name: v for v in values}
        missing, extra = sorted(set(want) - set(self.values)), sorted(set(self.values) - set(want))
        if missing or extra:
            raise CheckpointError(f"'{self.directory}' is a checkpoint of another program: it lacks state "
                                  f"{missing or 'none'} and has state this program does not take {extra or 'none'}")
        for name, value in want.items():
            saved = self.values[name]
            if tuple(saved["shape"]) != value.shape or dtypes.parse_dtype(saved["dtype"]) != value.dtype:
                raise CheckpointError(f"{self._where(name)}: saved as {dtypes.parse_dtype(saved['dtype'])}"
                                      f"{saved['shape']}, "
                                      f"this program takes {value.dtype}{list(value.shape)}")

    def read(self, name: str, slices: tuple[slice, ...] | None = None) -> np.ndarray:
        """The index range `slices` (default: all) of value `name`, from the saved blocks overlapping it."""
        value = self.values[name]
        shape = tuple(value["shape"])
        slices = slices if slices is not None else tuple(slice(0, n) for n in shape)
        bounds = [(s.start or 0, n if s.stop is None else s.stop) for s, n in zip(slices, shape)]
        out = np.empty(tuple(b - a for a, b in bounds), dtypes.parse_dtype(value["dtype"]))
        for block in value["blocks"]:
            where = overlap(bounds, block)
            if where is not None:
                out[where[1]] = self.load(name, block)[where[0]]
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every value as a global numpy array, by name, in the order saved."""
        return {name: self.read(name) for name in self.values}

    def load(self, name: str, block: dict) -> np.ndarray:
        """The saved block `block` of value `name` (a memory map)."""
        path = self.directory / block["file"]
        try:
            data = dtypes.from_npy(np.load(path, mmap_mode="r", allow_pickle=False),
                                   dtypes.parse_dtype(self.values[name]["dtype"]))
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"{self._where(name)}: block file '{path}' is not readable: {exc}") from None
        want = tuple(b - a for a, b in zip(block["start"], block["stop"]))
        if tuple(data.shape) != want or data.dtype != dtypes.parse_dtype(self.values[name]["dtype"]):
            raise CheckpointError(f"{self._where(name)}: block file '{path}' holds {data.dtype}{list(data.shape)}, "
                                  f"the manifest says {dtypes.parse_dtype(self.values[name]['dtype'])}{list(want)}")
        return data

    def _where(self, name: str) -> str:
        return f"checkpoint '{self.directory}', state '{name}'"


def overlap(bounds, block: dict) -> tuple[tuple[slice, ...], tuple[slice, ...]] | None:
    """Where saved `block` meets the index range `bounds` ((start, stop) per dim): (slices of the block, slices
    of the range), or None if they do not meet."""
    lo = [max(a, s) for (a, _), s in zip(bounds, block["start"])]
    hi = [min(b, e) for (_, b), e in zip(bounds, block["stop"])]
    if any(a >= b for a, b in zip(lo, hi)):
        return None
    return (tuple(slice(a - s, b - s) for a, b, s in zip(lo, hi, block["start"])),
            tuple(slice(a - o, b - o) for a, b, (o, _) in zip(lo, hi, bounds)))


def open_checked(directory: str | Path, values: Sequence[StateValue]) -> Checkpoint:
    """The checkpoint in `directory`, checked to hold `values` and to match its manifest byte for byte."""
    checkpoint = Checkpoint.open(directory)
    checkpoint.check_fits(values)
    checkpoint.verify()
    return checkpoint


def load_checkpoint(directory: str | Path, *, tensors: bool = False) -> dict:
    """The state saved in `directory` as a torch-style state dict: global numpy arrays by name (parameter and
    buffer names as the model's `state_dict()` has them, optimizer state as the training step names it), or
    torch tensors with `tensors=True`; every file is checked against the manifest first (CheckpointError).
    `model.load_state_dict` takes the parameters (`strict=False`, or pick the model's keys)."""
    checkpoint = Checkpoint.open(directory)
    checkpoint.verify()
    state = checkpoint.state_dict()
    if not tensors:
        return state
    try:
        import torch
    except ImportError:
        raise CheckpointError("load_checkpoint(..., tensors=True) needs torch: install it, or take the numpy "
                              "arrays (tensors=False)") from None
    return {name: as_tensor(array, torch) for name, array in state.items()}


__all__ = ["Checkpoint", "load_checkpoint", "MANIFEST", "StateValue", "begin", "block_file", "open_checked",
           "overlap", "save_jobs", "write_block", "write_manifest", "writers"]
