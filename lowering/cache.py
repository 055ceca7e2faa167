"""On-disk cache of compiled kernel libraries, keyed by a content hash.

Key = sha256 of (cache format, MLIR text, pipeline text, target CPU and
features, versions of the MLIR bindings and tools). An entry is a directory
`<root>/<key>/` holding `meta.json` (kernel signatures, the .so's name and
sha256) and `kernels-<sha256 prefix>.so`: naming the library by its content means
a path the dynamic loader has seen always holds the same code (dlopen returns
an already loaded object by path, so a rebuilt entry must not reuse a path). Entries are written to a temporary
directory and renamed into place, and a per-key `flock` serialises builders, so several MPI ranks on
one machine compile a program once and the others get a hit. An entry that
does not validate (missing file, bad JSON, wrong key, .so checksum mismatch) is
removed and rebuilt, never trusted.

Root: the `cache_dir` argument, else `$SLICER_CACHE_DIR`, else
`~/.cache/slicer/kernels` (`$XDG_CACHE_HOME` respected): each host has its own. A job across hosts builds or
finds its kernels on each host by cache key; a host whose CPU is the driver's (`host_cpu`: same model and
flags, so the same key) may instead take the driver's library bytes (`KernelCache.receive`, runtime's
kernel_transfer) rather than compiling them again.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from slicer.core import environment
from slicer.core.errors import KernelError
from slicer.core.host import cpu_info

log = logging.getLogger("slicer.kernels")

# Bump when the entry layout or the meaning of a key changes.
CACHE_FORMAT = 1
LIBRARY = "kernels.so"
META = "meta.json"


@dataclass
class CacheStats:
    """Process-wide counters: a test or launcher asserts 'compiled nothing' with `misses == 0`."""

    hits: int = 0
    misses: int = 0
    rebuilt_corrupt: int = 0


STATS = CacheStats()


def cache_stats() -> CacheStats:
    """A copy of this process's cache counters."""
    return CacheStats(STATS.hits, STATS.misses, STATS.rebuilt_corrupt)


def reset_cache_stats() -> None:
    STATS.hits = STATS.misses = STATS.rebuilt_corrupt = 0


def default_cache_dir() -> Path:
    chosen = environment.value(environment.CACHE_DIR)
    return Path(chosen) if chosen else Path(environment.cache_home()) / "slicer" / "kernels"


@lru_cache(maxsize=1)
def host_cpu() -> str:
    """This host's CPU as the cache key records it for native code: machine, model name and flags of the first
    processor (`core.host.cpu_info`, the one reader of /proc/cpuinfo). Two hosts with the same value build the
    same libraries under the same keys."""
    fields = cpu_info()  # /proc/cpuinfo rather than `llc --version`: a cache hit must not start a tool
    if not fields:
        return f"{platform.machine()}:{platform.processor()}"
    return f"{platform.machine()}:{fields.get('model name', '')}:{fields.get('flags', fields.get('Features', ''))}"


def cache_key(*parts: str) -> str:
    """sha256 over length-prefixed parts (so no two different part lists collide by concatenation)."""
    digest = hashlib.sha256(f"slicer-kernel-cache-{CACHE_FORMAT}".encode())
    for part in parts:
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Entry:
    """A validated cache entry."""

    directory: Path
    meta: dict

    @property
    def library(self) -> Path:
        return self.directory / self.meta["library"]


class KernelCache:
    """A directory of entries; `get_or_build(key, build)` is the only way in."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def entry_dir(self, key: str) -> Path:
        return self.root / key

    def lookup(self, key: str, *, repair: bool = False) -> Entry | None:
        """The valid entry for `key`, or None; with `repair` (under the key's lock) an invalid one is deleted."""
        directory = self.entry_dir(key)
        if not directory.exists():
            return None
        problem = self._problem(directory, key)
        if problem is None:
            return Entry(directory, json.loads((directory / META).read_text()))
        if not repair:
            return None
        log.warning("kernel cache entry %s is corrupt (%s); rebuilding it", directory, problem)
        STATS.rebuilt_corrupt += 1
        shutil.rmtree(directory, ignore_errors=True)
        return None

    def load(self, key: str) -> Entry:
        """The valid entry for `key`, which must exist: an MPI rank loads the entries its launcher built or
        found (KernelError if the entry is missing or no longer valid, e.g. deleted or rebuilt since)."""
        directory = self.entry_dir(key)
        problem = self._problem(directory, key) if directory.exists() else "it does not exist"
        if problem is not None:
            raise KernelError(f"kernel cache entry {directory} cannot be loaded: {problem}; it changed after the "
                              f"launcher compiled the kernels, run again")
        STATS.hits += 1
        return Entry(directory, json.loads((directory / META).read_text()))

    @staticmethod
    def _problem(directory: Path, key: str) -> str | None:
        try:
            meta = json.loads((directory / META).read_text())
        except (OSError, ValueError) as exc:
            return f"cannot read {META}: {exc}"
        if not isinstance(meta, dict) or meta.get("key") != key or meta.get("format") != CACHE_FORMAT:
            return f"{META} does not describe key {key[:12]}"
        library = meta.get("library")
        if not isinstance(library, str) or "/" in library:
            return f"{META} names no library"
        try:
            checksum = file_sha256(directory / library)
        except OSError as exc:
            return f"cannot read {library}: {exc}"
        if checksum != meta.get("library_sha256"):
            return f"{library} checksum mismatch"
        return None

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def publish_shared(self, key: str, library: Path, meta: dict) -> None:
        """Make `library` (a shared object holding several kernels, built together) the entry of `key`, with
        `meta` (the signature of this key's kernel in it), unless a valid entry exists: the file is linked
        into the entry (hard link, else copied), so every key built together shares one object on disk."""
        if self.lookup(key) is not None:
            return
        with self._locked(key):
            if self.lookup(key, repair=True) is not None:
                return
            STATS.misses += 1
            staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=self.root))
            try:
                checksum = file_sha256(library)
                name = f"kernels-{checksum[:16]}.so"
                try:
                    os.link(library, staging / name)
                except OSError:  # another file system, or no hard links: a copy
                    shutil.copyfile(library, staging / name)
                meta = dict(meta, format=CACHE_FORMAT, key=key, library=name, library_sha256=checksum)
                (staging / META).write_text(json.dumps(meta, indent=1))
                os.replace(staging, self.entry_dir(key))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise

    def library_bytes(self, key: str) -> tuple[dict, bytes]:
        """The valid entry of `key` as (meta, library bytes), to send to a host with the same CPU (`receive`)."""
        entry = self.load(key)
        return entry.meta, entry.library.read_bytes()

    def receive(self, key: str, meta: dict, data: bytes) -> Entry:
        """Make `data` (a library another host built, with its `meta`, from `library_bytes`) the entry of
        `key`, unless a valid entry exists; KernelError if the bytes do not match the meta's checksum or key."""
        entry = self.lookup(key)
        if entry is not None:
            return entry
        name = meta.get("library")
        if meta.get("key") != key or meta.get("format") != CACHE_FORMAT or not isinstance(name, str) or "/" in name \
                or hashlib.sha256(data).hexdigest() != meta.get("library_sha256"):
            raise KernelError(f"the kernel library received for cache key {key[:12]} does not match its meta data "
                              "(checksum or key): it was not stored")
        with self._locked(key):
            entry = self.lookup(key, repair=True)
            if entry is not None:
                return entry
            staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=self.root))
            try:
                (staging / name).write_bytes(data)
                (staging / META).write_text(json.dumps(meta, indent=1))
                os.replace(staging, self.entry_dir(key))
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return Entry(self.entry_dir(key), meta)

    def get_or_build(self, key: str, build: Callable[[Path], dict]) -> tuple[Entry, bool]:
        """(entry, hit). On a miss `build(tmpdir)` writes `kernels.so` there and returns the meta dict."""
        entry = self.lookup(key)
        if entry is not None:
            STATS.hits += 1
            return entry, True
        with self._locked(key):
            entry = self.lookup(key, repair=True)  # another process may have built it while we waited
            if entry is not None:
                STATS.hits += 1
                return entry, True
            STATS.misses += 1
            staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=self.root))
            try:
                meta = dict(build(staging))
                checksum = file_sha256(staging / LIBRARY)
                library = f"kernels-{checksum[:16]}.so"
                os.replace(staging / LIBRARY, staging / library)
                meta.update(format=CACHE_FORMAT, key=key, library=library, library_sha256=checksum)
                (staging / META).write_text(json.dumps(meta, indent=1))
                final = self.entry_dir(key)
                os.replace(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        return Entry(final, meta), False
