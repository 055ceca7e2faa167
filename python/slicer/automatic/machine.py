"""One device's kernel and collective-overhead figures (`Machine`): what the search's model
(`cost_model.Evaluator`) and the compiled programs' pricing (`graph_cost.price_graph`) charge for the work of a
program, and where they come from.

The figures describe the machine the programs run on: the same program runs twice as fast on a core with a full
512-bit FMA datapath as on one with 256-bit units, so no built-in set predicts every machine. `slicer-plan
--calibrate kernels` measures them here (probe programs compiled and run on this machine's ranks, the figures
fitted to their times: `machine_fit.py`) and stores them beside the links' figures
(`$XDG_CACHE_HOME/slicer/machine.json`); `Machine.default` reads that file, or the one `$SLICER_MACHINE` names
(`builtin` forces the built-in figures, which the test suites use so that the search's choices do not depend on
the machine), else uses the built-in figures.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from slicer.core import environment
from slicer.core.errors import AutoError
from slicer.core.figure_files import chosen_figures, read_figures, write_figures
from slicer.redistribution.costs import calibration_path

ENV = environment.MACHINE.name


@dataclass(frozen=True)
class Machine:
    """One device's kernel figures as whole programs run them on this machine's ranks: contractions in FLOP/s,
    other ops in FLOP/s and bytes/s (of data in cache, and of data read from memory: a value last touched more
    than `cache_bytes` ago, `cache_reads.py`), a cost per array a kernel takes or returns, a cost per op (its loop
    nest's set-up, the fused body's passes), per kernel (a call through the runtime) and per run; and what a collective
    costs beyond its alpha/beta transfer: the other ranks post it up to `sync_seconds` later (ranks sharing cores drift
    apart; hidden when it is posted long before it is needed, `cost_model.wait_for`) and the rank's own work on it
    (`collective_seconds`: packing, issuing, unpacking, on the core the kernels need).

    The built-in figures were fitted to whole programs measured on the development machine's 2 ranks on
    2026-11-27 (AVX2-class cores, load average 1.6-2.4): the 15 hand-written contenders of benchmarks/auto.py on
    mesh 2 (mlp, attention, GPT-2 block, 4-layer GPT forward and AdamW training step, each with `data`,
    `megatron` and `fsdp`), their kernel graphs priced by `graph_cost.price_graph`, the figures chosen on a grid
    to minimise the worst relative error (every one within 21%). On a machine with other cores they are off by
    the cores' difference (2x on a core with a full 512-bit FMA datapath): `slicer-plan --calibrate kernels`
    measures this machine's (module docstring). Under load every figure worsens, which no fixed set follows."""

    contraction_flops: float = 1.5e11
    vector_flops: float = 3.0e9
    bandwidth: float = 4.0e10
    memory_bandwidth: float = 4.0e10  # bytes/s of the reads that miss the cache (`cache_reads.py`)
    op_seconds: float = 5.0e-6
    kernel_seconds: float = 2.0e-5
    # Per array a kernel call is given or returns (its descriptor, its output's allocation, the runtime's count of
    # what it holds): a training step's optimizer kernels take and return hundreds. The compiled price
    # (`graph_cost`) charges it; the search's model does not: it is about the same for every tiling of a program,
    # and charged there it moved the search on the GPT training step on 2x2 under its budget (a near-tie of
    # tilings whose modelled peaks err differently) to one compiled much slower than FSDP.
    array_seconds: float = 1.0e-6
    run_seconds: float = 1.0e-4  # a run's fixed cost on the ranks (argument and result blocks, the first call)
    sync_seconds: float = 5.0e-5
    collective_seconds: float = 1.0e-4
    cache_bytes: float = 16 * 2**20  # one device's share of the largest cache: measured, not fitted
    overlap: float = 0.5  # the share of a collective's transfer kernels can hide: ranks progress MPI between
    #                       kernels, and shared-memory copies run on the same cores as the kernels
    source: str = field(default="built-in", compare=False)

    def __post_init__(self):
        for name in FIGURES:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise AutoError(f"machine figure {name} = {value!r} ({self.source}): give a positive number; rerun "
                                "slicer-plan --calibrate kernels")
        if not (isinstance(self.cache_bytes,
                           (int, float)) and math.isfinite(self.cache_bytes) and self.cache_bytes > 0):
            raise AutoError(f"machine figure cache_bytes = {self.cache_bytes!r} ({self.source}): give a positive "
                            "number of bytes; rerun slicer-plan --calibrate kernels")
        if not 0 <= self.overlap <= 1:
            raise AutoError(f"machine figure overlap = {self.overlap!r} ({self.source}): give a share between 0 and 1")

    def op_time(self, flops: float, contraction: bool, produced: int, read: int, cold: int = 0) -> float:
        """Seconds of one op doing `flops` (a contraction's, or other), reading `read` bytes (`cold` of them from
        memory, not the cache: `cache_reads.py`) and storing `produced`: a contraction at its rate (it reuses each
        byte it reads many times from the cache) plus its cold bytes at the memory's bandwidth (its blocks are
        packed from memory first: a backward block of the GPT step ran 20-30% slower with its caches flushed than
        run over and over); another op at its arithmetic rate or at the bandwidth its bytes need, the slower (an
        optimizer's update reads three or four parameter-sized tensors for each it stores)."""
        if contraction:
            seconds = flops / self.contraction_flops + cold / self.memory_bandwidth
        else:
            moved = (read - cold + produced) / self.bandwidth + cold / self.memory_bandwidth
            seconds = max(flops / self.vector_flops, moved)
        return seconds + (self.op_seconds if flops else 0.0)

    # -- stored figures -------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {name: getattr(self, name) for name in STORED}

    @classmethod
    def from_dict(cls, data: dict, source: str = "") -> Machine:
        """Figures from a stored file: every figure it names (the others built-in)."""
        if not isinstance(data, dict):
            raise AutoError(f"machine figures {source or 'data'} are not a JSON object; rerun slicer-plan --calibrate "
                            "kernels")
        unknown = sorted(set(data) - set(STORED))
        if unknown:
            raise AutoError(f"machine figures {source or 'data'} name {', '.join(unknown)}, which are not figures "
                            f"(known: {', '.join(STORED)}); rerun slicer-plan --calibrate kernels")
        try:
            values: dict[str, Any] = {name: float(value) for name, value in data.items()}  # figures: floats
        except (TypeError, ValueError) as exc:
            raise AutoError(f"machine figures {source or 'data'} are not numbers ({exc}); rerun slicer-plan "
                            "--calibrate kernels") from None
        return replace(cls(source=source or "built-in"), **values)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Machine:
        data, problem = read_figures(path, "the machine figures", "slicer-plan --calibrate kernels")
        if problem:
            raise AutoError(problem)
        return cls.from_dict(data, str(path))

    def save(self, path: str | os.PathLike | None = None) -> Path:
        return write_figures(Path(path) if path is not None else machine_path(), self.to_dict())

    @classmethod
    def default(cls) -> Machine:
        """The figures the search uses: `$SLICER_MACHINE` (a path, or `builtin`), else the calibrated file if there
        is one, else the built-in figures. A file is read again only when it changes."""
        return chosen_figures(environment.MACHINE, machine_path(), cls, cls.load)

    def __str__(self) -> str:
        return (f"contractions {self.contraction_flops / 1e9:.3g} GFLOP/s, other ops {self.vector_flops / 1e9:.3g} "
                f"GFLOP/s and {self.bandwidth / 1e9:.3g} GB/s ({self.memory_bandwidth / 1e9:.3g} GB/s from memory past "
                f"{self.cache_bytes / 2**20:.3g} MiB of cache), {self.op_seconds * 1e6:.3g} us per op, "
                f"{self.kernel_seconds * 1e6:.3g} us per kernel, {self.array_seconds * 1e6:.3g} us per array, "
                f"{self.run_seconds * 1e6:.3g} us per run, "
                f"{self.collective_seconds * 1e6:.3g} us per collective + {self.sync_seconds * 1e6:.3g} us lag "
                f"({self.source})")


#: The figures a calibration fits (all but `overlap`, a share the probes cannot separate from the links' own
#: figures), in the order of `Machine`'s fields; and every figure a file holds.
FIGURES = tuple(f.name for f in fields(Machine) if f.name not in ("cache_bytes", "overlap", "source"))
STORED = (*FIGURES, "cache_bytes", "overlap")


def machine_path() -> Path:
    """Where `slicer-plan --calibrate kernels` stores the figures: beside the links' (`costs.calibration_path`)."""
    return calibration_path().with_name("machine.json")
