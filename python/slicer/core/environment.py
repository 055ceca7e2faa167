"""The environment variables Slicer reads, and the one place that reads them.

What changes a compiled program is an argument (of `slicer.compile`, of a pass); the environment holds only facts
about the machine (its calibrated figures, its caches, its MPI) and defaults a user sets once for every call.
`VARIABLES` lists each with its default, its meaning and the module that uses it; docs/environment.md shows the
same table (a test compares them, and another fails if any other module of the package reads the environment).
A reader asks `value(VARIABLE)`: the text set, or None; what the text means is the reader's to check.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import InternalError, OptionError


@dataclass(frozen=True)
class Variable:
    """One environment variable: its `name`, the `default` behaviour when it is unset, what it `means`, the
    module that reads it (`reader`, a file of the package); `slicer`: Slicer's own (else the system's or MPI's)."""

    name: str
    default: str
    means: str
    reader: str
    slicer: bool = True


def _own(name: str, default: str, means: str, reader: str) -> Variable:
    return Variable(f"SLICER_{name}", default, means, reader)


BUCKETS = _own("BUCKETS", "`auto`", "default of `slicer.compile(buckets=)`: `0`/`off`, `1`/`auto` (the cost model's "
               "size) or a bucket size in bytes", "spmd/bucketing.py")
COLLECTIVE_MATMUL = _own("COLLECTIVE_MATMUL", "`auto`", "default of `slicer.compile(collective_matmul=)`: `0`/`off`, "
                         "`1`/`auto` (the cost model decides) or a chunk count >= 2",
                         "spmd/chunked_contractions.py")
COST_MODEL = _own("COST_MODEL", "the calibrated file, else built in", "the links' figures: a JSON file "
                  "(`slicer-plan --calibrate links`) or `builtin`", "redistribution/costs.py")
MACHINE = _own("MACHINE", "the calibrated file, else built in", "the kernels' figures `slicer.auto` prices with: "
               "a JSON file (`slicer-plan --calibrate kernels`) or `builtin`", "automatic/machine.py")
AUTO_PROCESSES = _own("AUTO_PROCESSES", "one per core", "at most this many processes for `slicer.auto`'s search "
                      "(`1`: none forked)", "automatic/parallel.py")
PROGRESS = _own("PROGRESS", "on a terminal, unless `CI` is set", "`1`: draw the progress line on any stream, `0`: "
                "never", "core/progress.py")
CACHE_DIR = _own("CACHE_DIR", "`$XDG_CACHE_HOME/slicer/kernels`", "the folder of compiled kernel libraries",
                 "lowering/cache.py")
KERNEL_CODEGEN = _own("KERNEL_CODEGEN", "`in-process`", "`tools`: generate kernel code with mlir-translate and llc "
                      "instead of in this process", "lowering/llvm_codegen.py")
KERNEL_COMPILE_SECONDS = _own("KERNEL_COMPILE_SECONDS", "`900`", "seconds one LLVM tool may take on a kernel "
                              "library before `BudgetExceeded`", "lowering/aot.py")
OVERSUBSCRIBE = _own("OVERSUBSCRIBE", "`0`", "`1`: allow more local ranks than cores everywhere (as "
                     "`oversubscribe=True`)", "runtime/jobs/resources.py")
MPI_YIELD = _own("MPI_YIELD", "on when the ranks outnumber the cores", "`1`/`0`: MPICH ranks sleep between polls "
                 "while they wait / spin", "runtime/jobs/mpiexec.py")
COLLECTIVES = _own("COLLECTIVES", "`auto`", "default of `Program.run(collectives=)` and `session(collectives=)`: how "
                   "ranks run collectives, `shm` (shared memory), `mpi`, or `auto` (shared memory for groups on one "
                   "host)", "runtime/collectives/shm_collectives.py")
OVERLAP = _own("OVERLAP", "`1`", "default of `Program.run(overlap=)` and `session(overlap=)`: `0` makes ranks wait for "
               "every collective where it stands (no overlap with kernels)", "runtime/execution/executor.py")
KEEP_RANKS = _own("KEEP_RANKS", "`0`", "`1`: an untimed `Program.run(..., ranks=N)` reuses a job of N ranks kept "
                  "warm", "runtime/jobs/rank_pool.py")
RANK_SILENCE_SECONDS = _own("RANK_SILENCE_SECONDS", "`5`", "seconds a busy rank may send no heartbeat before the "
                            "driver ends the job as hung", "runtime/jobs/rank_job.py")
RANK_HOOK = _own("RANK_HOOK", "none", "a Python file each rank loads; its `at_step(rank, step)` runs at the rank's "
                 "named steps (the tests kill or stop ranks with it)", "runtime/jobs/rank.py")
SESSION_KEY = _own("SESSION_KEY", "set by the driver", "the key a rank of a job the driver started (a run or a "
                   "session) authenticates with (the driver sets it for its ranks)", "runtime/jobs/rank_server.py")
DRIVER_ADDRESS = _own("DRIVER_ADDRESS", "every interface of the driver's host", "`HOST[:PORT]` the ranks connect "
                      "back to: an address, host name or interface (`eth0`) of the driver's host that the job's "
                      "other hosts reach; `PORT` fixes the port (else any free one)", "runtime/jobs/rank_link.py")


def _system(name: str, means: str, reader: str) -> Variable:
    return Variable(name, "unset", means, reader, slicer=False)


CI = _system("CI", "set: no progress line", "core/progress.py")
CC = _system("CC", "the C compiler that links kernel libraries (else `cc`, `gcc` or `clang` on PATH)",
             "lowering/aot.py")
XDG_CACHE_HOME = _system("XDG_CACHE_HOME", "the cache folder (else `~/.cache`) of kernels and calibrated figures",
                         "core/environment.py")
PMI_SIZE = _system("PMI_SIZE", "set by MPICH in every rank: the job's size", "runtime/jobs/in_job.py")
OMPI_COMM_WORLD_SIZE = _system("OMPI_COMM_WORLD_SIZE", "set by Open MPI in every rank: the job's size",
                               "runtime/jobs/in_job.py")
MPICH_YIELD = _system("MPIR_CVAR_ENABLE_HEAVY_YIELD", "MPICH's sleeping wait; when set, `SLICER_MPI_YIELD` is not "
                      "consulted", "runtime/jobs/mpiexec.py")
THREADS = tuple(_system(name, "a library's thread count; unset: the ranks get `1`", "runtime/jobs/mpiexec.py")
                for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"))

VARIABLES: tuple[Variable, ...] = tuple(v for v in globals().values() if isinstance(v, Variable)) + THREADS
"""Every variable Slicer reads: its own first, then the system's."""

_KNOWN = {variable.name for variable in VARIABLES}


def value(variable: Variable) -> str | None:
    """The text `variable` is set to, or None when it is unset."""
    if variable.name not in _KNOWN:
        raise InternalError(f"{variable.name} is not in slicer.core.environment.VARIABLES: add it to the table")
    return os.environ.get(variable.name)


def switch(variable: Variable) -> str | int:
    """The setting of a variable that turns a rewrite off, leaves it to the cost model or gives it a number:
    "off" (`0`, `off`, `false`, `no`), "auto" (unset, `1`, `on`, `auto`, `true`, `yes`) or the whole number set;
    `OptionError` for any other text."""
    text = (value(variable) or "").strip().lower()
    if text in ("0", "off", "false", "no"):
        return "off"
    if text in ("", "1", "on", "auto", "true", "yes"):
        return "auto"
    if text.isdigit():
        return int(text)
    raise OptionError(f"{variable.name}={text!r} is not 0/off, 1/auto or a whole number (it is the {variable.means})")


def cache_home() -> str:
    """The user's cache folder: `$XDG_CACHE_HOME`, else `~/.cache`."""
    return value(XDG_CACHE_HOME) or os.path.join(os.path.expanduser("~"), ".cache")


def for_child(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a child process (an mpiexec job) starts with: this process's, with `extra` on top."""
    return {**os.environ, **(extra or {})}


def slicer_settings() -> tuple[tuple[str, str], ...]:
    """The Slicer and MPICH settings of this process, sorted: a rank started under other ones may behave
    differently (`runtime/jobs/rank_pool.py` keeps a warm job only for the settings it started under)."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(("SLICER_", "MPIR_"))))


def table() -> str:
    """`VARIABLES` as the Markdown table docs/environment.md shows."""
    rows = ["| Variable | Default | Meaning | Read in (python/slicer/) |", "|---|---|---|---|"]
    rows += [f"| `{v.name}` | {v.default} | {v.means} | `{v.reader}` |" for v in VARIABLES]
    return "\n".join(rows)


__all__ = ["VARIABLES", "Variable", "cache_home", "for_child", "slicer_settings", "switch", "table", "value"]

if __name__ == "__main__":  # the table docs/environment.md shows
    print(table())
