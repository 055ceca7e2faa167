"""The Python front door (layer 15 of docs/architecture.md): `slicer.compile(...)` gives a `Program` to
explain and run; `apply_tactics` and `propagate` run single stages.

    prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=2),
                          tactics=[slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")])
    print(prog.explain())                 # distributed types, collectives, bytes, memory, kernels
    prog.show("w1")                       # which device holds which block of %w1 (text; png="w1.png" too)
    out = prog.run(x, w1, b1, w2, ranks=4)    # 4 MPI ranks (mpiexec), numpy in and out
    out = prog.run(x, w1, b1, w2)             # ranks=None: the in-process SPMD simulator
    out = prog.run_in_mpi(x, w1, b1, w2)      # already under mpiexec: each rank takes its blocks

Compilation is tactics -> propagation -> partitioning -> kernel extraction; the stages are the passes
`slicer-opt` runs, so any stage can be reproduced there. `slicer.auto(program, mesh, memory_budget=...)`
searches the tactics instead (`slicer.automatic`). Every compile-time problem raises `CompileError`
(or a subclass, e.g. `TacticError`), every run-time problem `RunError`.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from mlir import ir

from slicer.checking import check_equivalent
from slicer.core import dtypes
from slicer.core.arrays import as_array
from slicer.core.errors import (
    CompileError,
    DegradedStrategy,
    InvalidTactic,
    KernelGraphError,
    Located,
    MeshError,
    ResourceError,
    RunError,
    SlicerError,
    TacticError,
)
from slicer.core.functions import EntryError, entry_function, function_name, function_type, value_names
from slicer.core.mesh import Mesh
from slicer.core.operations import as_op
from slicer.core.progress import Progress
from slicer.dialect import make_context, parse_source, walk_ops
from slicer.frontends import ImportedProgram, import_for_context
from slicer.lowering import KernelGraph, build_kernel_graph
from slicer.lowering.contract.matrix_units import AUTO, BF16_UNITS, host_units
from slicer.passes import run_pipeline
from slicer.pipelining import compile_pipeline, refuse_pipelined_module
from slicer.propagation import explain as explain_propagation
from slicer.runtime import RunOptions, Simulator, Timings, launch
from slicer.runtime.jobs import in_job
from slicer.runtime.jobs.in_job_session import InJobSession
from slicer.runtime.jobs.rank_pool import borrow, give_back, keeping_ranks, run_warm
from slicer.runtime.jobs.resources import check_memory, check_ranks
from slicer.runtime.jobs.session import LaunchedSession, Session, SessionPlan, SimulatedSession
from slicer.spmd import report
from slicer.spmd.bucketing import bucket_setting
from slicer.spmd.chunked_contractions import chunks_setting
from slicer.spmd.degraded import by_cause
from slicer.strategies import follow_arguments
from slicer.tactics import Remat, Replicate, Tactic, TacticRewriter, Tile
from slicer.tactics.pipeline_tactic import Pipeline
from slicer.viz import BlockPicture, MemoryReport, context_lines, memory_report, source_names, value_picture
from slicer.viz.block_picture import uneven_dims
from slicer.viz.experts import expert_lines, expert_report, experts_per_device
from slicer.viz.remat_memory import RematReport, remat_units


@dataclass(frozen=True)
class Program:
    """A partitioned program: the original, its SPMD form, its kernel graph and the propagation report.

    Compiled from an `ImportedProgram` (`slicer.from_torch`), it keeps the import as `imported`: its arguments
    have names, and `run` takes the model's inputs only (the parameters are bound)."""

    original: str
    spmd: str
    graph: KernelGraph
    propagation: str
    arg_names: tuple[str | None, ...] = ()
    imported: ImportedProgram | None = None
    before_remat: str | None = None
    """The SPMD program before `slicer-remat` (when a `Remat` tactic rewrote it): `memory()` compares the peaks."""
    _simulator: Simulator | None = field(default=None, init=False, repr=False, compare=False)
    _names: dict | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def mesh(self) -> Mesh:
        return self.graph.mesh

    def explain(self, timings: Timings | None = None) -> str:
        """The readable report: distributed types, collectives with bytes per device, propagation, memory per
        device (with the peaks the ranks measured when `timings` of a run are given; by role for a training
        step: parameters, optimizer state, batch, activations and gradients), kernels."""
        with make_context():
            collectives = (found := report(ir.Module.parse(self.spmd))).text()
        g, roles = self.graph, self.imported.arg_roles if self.imported is not None else ()
        lines = [f"@{g.entry} on mesh {g.mesh} ({g.mesh.device_count} devices)", "distributed types:"]
        for i, name in enumerate(g.args):
            v = g.values[name]
            uneven = "".join(f"; {note}" for note in uneven_dims(g.mesh, v.dist, g.arg_shape(i)))
            lines.append(f"  arg #{i}{self._named(i)}: {v.dtype}{list(g.arg_shape(i))} as {v.dist} "
                         f"(local {list(v.local_shape)}{uneven})")
        result_names = self._result_names()
        for i, (dist, source) in enumerate(zip(g.result_dists, g.result_sources)):
            named = f" ({result_names[i]})" if i < len(result_names) and result_names[i] else ""
            uneven = "".join(f"; {note}" for note in uneven_dims(g.mesh, dist, g.result_shape(i)))
            lines.append(f"  result #{i}{named}: {list(g.result_shape(i))} as {dist} ({source}{uneven})")
        experts = expert_lines(*expert_report(self.spmd, g, self.arg_names, roles)) + context_lines(found, g.entry)
        lines += ["collectives:", *("  " + line for line in collectives.splitlines()), *experts,
                  "propagation:", *("  " + line for line in self.propagation.splitlines())]
        try:
            lines.append(self.memory(timings).text())
        except KernelGraphError as exc:  # e.g. an element type numpy has no dtype for
            lines.append(f"memory per device: not estimated ({exc})")
        lines.append(str(g))
        return "\n".join(lines)

    def _named(self, index: int) -> str:
        return f" ({self.arg_names[index]})" if index < len(self.arg_names) and self.arg_names[index] else ""

    def memory(self, timings: Timings | None = None) -> MemoryReport:
        """Bytes per device: argument and result blocks, the peak of live blocks during the run (kernel-graph
        liveness with the collectives' buffers), the unpartitioned program's figures, and with `timings` of a
        run the peak each rank measured (slicer.viz.memory)."""
        roles = self.imported.arg_roles if self.imported is not None else ()
        found = memory_report(self.graph, self.original, timings, roles, names=self.value_names())
        found = replace(found, experts=experts_per_device(self.spmd, self.graph, self.arg_names, roles))
        if self.before_remat is None:
            return found
        without = memory_report(build_kernel_graph(self.before_remat, self.graph.entry), names={})
        return replace(found, remat=RematReport(remat_units(self.spmd, self.graph.entry), found.peak, without.peak))

    def value_names(self) -> dict[str, str]:
        """Kernel-graph value ("%4") -> the name the program gives it: an argument's or result's own name (a
        model's input or parameter, `arg_names`), else its SSA name in the source ("%w1")."""
        names = self._names
        if names is None:
            names = source_names(self.graph, self.original, self.arg_names, self._result_names())
            object.__setattr__(self, "_names", names)
        return dict(names)

    def picture(self, what, *, grid_dims: tuple[int, ...] | None = None) -> BlockPicture:
        """The picture of which device holds which block of a value: `what` is an argument index, "arg1",
        "result0", a value of the kernel graph ("%4", as `explain()` lists them) or a name from the source
        ("w1"), or the name of an argument or result (a model's input "x" or parameter "fc1.weight"). `.text()`
        for terminals, `.png(path)` for a file (matplotlib). Raises `VizError`."""
        return value_picture(self.graph, what, self.original, names=self.value_names(), grid_dims=grid_dims)

    def show(self, what, *, png: str | Path | None = None, grid_dims: tuple[int, ...] | None = None) -> None:
        """Print the block picture of a value (see `picture`); with `png`, also draw it into that file."""
        picture = self.picture(what, grid_dims=grid_dims)
        print(picture.text())
        if png is not None:
            picture.png(png)

    # -- running -----------------------------------------------------------------------------------------
    def check_arrays(self, arrays) -> list[np.ndarray]:
        """`arrays` as numpy arrays (torch tensors accepted), checked against the arguments' shapes and dtypes
        (RunError if not). For an imported program, `arrays` are the model's inputs; the parameters are
        appended."""
        g = self.graph
        if self.imported is not None:
            arrays = self.imported.bind(arrays)
        if len(arrays) != len(g.args):
            raise RunError(f"@{g.entry} takes {len(g.args)} arrays, got {len(arrays)}")
        checked = []
        for i, (array, name) in enumerate(zip(arrays, g.args)):
            array = as_array(array)
            v = g.values[name]
            want = v.numpy_dtype
            if tuple(array.shape) != g.arg_shape(i) or array.dtype != want:
                raise RunError(f"argument #{i}{self._named(i)} of @{g.entry} must be {want}{list(g.arg_shape(i))}, "
                               f"got {array.dtype}{list(array.shape)}{dtypes.conversion_hint(want)}")
            checked.append(array)
        return checked

    def run(self, *arrays: np.ndarray, ranks: int | None = None, repeat: int = 1, timeout: float = 600,
            mpiexec: str | None = None, oversubscribe: bool = False, return_timings: bool = False,
            collectives: str | None = None, overlap: bool | None = None):
        """Run on `ranks` MPI ranks (None: the in-process simulator): numpy arrays (a tuple for several results),
        and with `return_timings` the MPI run's `Timings` (`repeat` timed runs: medians per step of the slowest
        rank). More ranks than a host's cores need `oversubscribe=True`; `mpiexec`: the launcher (docs/runtime.md).
        `SLICER_KEEP_RANKS=1`: an untimed run reuses a kept job (`runtime.jobs.rank_pool`). `collectives` ("auto",
        "shm", "mpi") and `overlap` (with kernels): how ranks run collectives (None: SLICER_COLLECTIVES, _OVERLAP)."""
        checked, options = self.check_arrays(arrays), RunOptions.chosen(collectives, overlap)
        if ranks is None:
            if return_timings:
                raise RunError("timings are measured on MPI ranks: give ranks=N with return_timings=True")
            try:
                check_memory(self.graph, self.mesh.device_count, what="simulated devices in this process")
            except ResourceError as exc:
                raise RunError(str(exc)) from None
            return self.simulator()(*checked)
        if ranks != self.mesh.device_count:
            raise RunError(f"the mesh {self.mesh} has {self.mesh.device_count} devices: run with "
                           f"ranks={self.mesh.device_count}")
        if mpiexec is None:  # this host's ranks: refused before starting them (else per host, as they report)
            check_ranks(ranks, oversubscribe)
            check_memory(self.graph, ranks)
        if keeping_ranks() and repeat == 1 and not return_timings:
            return run_warm(self.graph, checked, ranks, mpiexec=mpiexec, timeout=timeout, oversubscribe=oversubscribe,
                            options=options)
        results, timings = launch(self.graph, ranks, arrays=checked, repeat=repeat, timeout=timeout, mpiexec=mpiexec,
                                  oversubscribe=oversubscribe, options=options)
        outputs = results[0] if len(results) == 1 else tuple(results)
        return (outputs, timings) if return_timings else outputs

    def session(self, ranks: int | None = None, *, state: Mapping | None = None, oversubscribe: bool = False,
                mpiexec: str | None = None, timeout: float = 600, comm=None, collectives=None, overlap=None) -> Session:
        """A session that runs this program step after step with its state resident where it runs (see
        `slicer.runtime.jobs.session`): `with prog.session(ranks=4) as s: loss = s.step(*batch)`.

        The state is every argument that is not an input: for an imported program (`slicer.training_step`,
        `slicer.from_torch`) its bound parameters, buffers and optimizer state; `state` gives or overrides
        initial values by argument name (or position). A result named like an argument replaces it after each
        step; the other results are what `step` returns. `ranks=None` runs on the in-process simulator; under an
        MPI job (`mpiexec -n N python train.py`, or `comm` given) every rank of the job runs its part.
        `oversubscribe`, `mpiexec`, `timeout` (seconds per request), `collectives`, `overlap`: as `run` takes them."""
        plan, options = self._session_plan(state), RunOptions.chosen(collectives, overlap)
        comm = comm if comm is not None else in_job.job_comm()
        if comm is not None:
            if ranks is not None and ranks != comm.Get_size():
                raise RunError(f"ranks={ranks} inside an MPI job of {comm.Get_size()} ranks: the session runs on the "
                               "job's ranks (omit ranks)")
            in_job.check_job(comm, self.mesh)
            return InJobSession(plan, comm, options=options)
        if ranks is None:
            try:
                check_memory(self.graph, self.mesh.device_count, what="simulated devices in this process")
            except ResourceError as exc:
                raise RunError(str(exc)) from None
            return SimulatedSession(plan, self.simulator())
        if ranks != self.mesh.device_count:
            raise RunError(f"the mesh {self.mesh} has {self.mesh.device_count} devices: start the session with "
                           f"ranks={self.mesh.device_count}")
        if mpiexec is None:
            check_ranks(ranks, oversubscribe)
            check_memory(self.graph, ranks)
        return LaunchedSession(plan, ranks, mpiexec=mpiexec, timeout=timeout, oversubscribe=oversubscribe,
                               give_back=give_back, options=options,
                               borrow=lambda: borrow(ranks, mpiexec, timeout))  # the kept job (SLICER_KEEP_RANKS=1)

    def session_plan(self, state_names: Sequence[str] = ()) -> SessionPlan:
        """How this program runs as a session (what `session.reshard(program)` takes): an imported program's
        state is its bound state; another's is its arguments named in `state_names` (their initial values
        empty: a reshard moves the values in)."""
        if self.imported is not None:
            return self._session_plan(None)
        g, names = self.graph, self.arg_names or ()
        return self._session_plan({n: np.empty(g.arg_shape(i), g.values[g.args[i]].numpy_dtype)
                                   for i, n in enumerate(names) if n in state_names})

    def _session_plan(self, given: Mapping | None) -> SessionPlan:
        g = self.graph
        names = tuple(n or f"arg{i}" for i, n in enumerate(self.arg_names or (None,) * len(g.args)))
        state: dict[int, np.ndarray] = {}
        roles = self.imported.arg_roles if self.imported is not None else ()
        hyper = {i: names[i] for i, role in enumerate(roles) if role == "hyper"}  # set at each step, not held
        if self.imported is not None:
            state = {self.imported.num_inputs + i: as_array(v) for i, v in enumerate(self.imported.parameters)
                     if self.imported.num_inputs + i not in hyper}
        for key, value in (given or {}).items():
            index = names.index(key) if key in names else key
            if not isinstance(index, int) or not 0 <= index < len(g.args) or index in hyper:
                what = "a hyperparameter: pass it to session.step(..., name=value)" if index in hyper else \
                    f"not an argument of @{g.entry} (arguments: {', '.join(names)})"
                raise RunError(f"state names {key!r}, which is {what}")
            state[index] = as_array(value)
        for index, array in state.items():
            v = g.values[g.args[index]]
            if tuple(array.shape) != g.arg_shape(index) or array.dtype != v.numpy_dtype:
                raise RunError(f"state '{names[index]}' must be {v.numpy_dtype}{list(g.arg_shape(index))}, got "
                               f"{array.dtype}{list(array.shape)}")
        result_names = self._result_names()
        feeds = {r: names.index(n) for r, n in enumerate(result_names) if n in names and names.index(n) in state}
        inputs = tuple(i for i in range(len(g.args)) if i not in state and i not in hyper)
        return SessionPlan(g, inputs, state, feeds, names, result_names, hyper, *(  # and the order a batch takes
            (self.imported.hyperparameters if hyper else None, self.imported.arrange) if self.imported else ()))

    def _result_names(self) -> tuple[str, ...]:
        if self.imported is not None and self.imported.result_names:
            return self.imported.result_names
        with make_context():
            try:
                module = parse_source(self.original, "<text>")  # held: the bindings do not keep it alive for `func`
                func = entry_function(module, self.graph.entry)
            except EntryError:
                return ()
            return tuple(n or "" for n in value_names(func, "result"))

    def simulator(self) -> Simulator:
        """The in-process simulator of this program (`run` with `ranks=None`), built once: its kernels are the
        native ones the ranks load, compiled once per content hash into the on-disk kernel cache (so a second
        `run`, or another process compiling the same program, compiles nothing)."""
        simulator = self._simulator
        if simulator is None:
            simulator = Simulator(self.graph, backend="native")
            object.__setattr__(self, "_simulator", simulator)
        return simulator

    def run_in_mpi(self, *arrays: np.ndarray, comm=None, collectives: str | None = None, overlap: bool | None = None):
        """For code already running under mpiexec: every rank passes the global arrays (a memory map
        is enough: each rank reads only its blocks); rank 0 gets the results, the others None. `comm`: the
        job's communicator (default COMM_WORLD); it needs one rank per device of the mesh (RunError if not);
        `collectives`, `overlap`: as `run`'s, settled on rank 0. As `slicer-run` under mpiexec (runtime.jobs.in_job)."""
        outputs = in_job.run_arrays(self.graph, self.check_arrays(arrays), comm or in_job.world(),
                                    collectives=collectives, overlap=overlap)
        return None if outputs is None else outputs[0] if len(outputs) == 1 else tuple(outputs)


def apply_tactics(module: ir.Module | ir.Operation | str, tactics: Sequence[Tactic] = (), *,
                  mesh: Mesh | dict | str | None = None, entry: str | None = None,
                  check_each_step: bool = False) -> ir.Module | ir.Operation:
    """Apply the module's IR annotations, then `tactics` in order; returns the (rewritten) module.

    - `tactics` refer to arguments/results of `entry` (default: the module's only function, or its only
      public one).
    - `mesh`: the mesh the tactics' axes belong to. Omit it when the module declares exactly one
      `slicer.mesh`; give a mesh name to choose among several; give a `Mesh` or `{axis: size}` mapping to
      use a matching declared mesh, or to insert `slicer.mesh @mesh` when the module declares none.
    - A module given as text is parsed into a fresh context and the new module returned; an
      `ir.Module`/`ir.Operation` is rewritten in place and returned.

    Raises `TacticError` (all problems, each located at the function or annotate op and naming the tactic)
    without changing the module. With `check_each_step`, the program is run through the JIT after every
    tactic and compared with the original (`StepMismatch` names the tactic on a mismatch)."""
    tactics = tuple(tactics)
    for tactic in tactics:
        if not isinstance(tactic, (Tile, Replicate)):
            raise InvalidTactic(f"{tactic!r} is not a tactic; use slicer.Tile(...) or slicer.Replicate(...)")
    if isinstance(module, str):
        with make_context(), ir.Location.unknown():
            module = ir.Module.parse(module)
    op = as_op(module)
    after_each = None
    if check_each_step:
        original = str(op)
        after_each = lambda label: check_equivalent(original, str(op), step=f"tactic {label}")  # noqa: E731
    TacticRewriter(op, tactics, mesh=mesh, entry=entry, after_each=after_each).run()
    return module


def propagate(module, *, strict_conflicts: bool = False, check_each_step: bool = False):
    """Run `slicer-propagate` on `module` (an ir.Module/Operation, rewritten in place, or text, parsed into a
    fresh context); returns the module. Raises `CompileError` with located diagnostics on conflicts (strict)
    or unsupported ops."""
    if isinstance(module, str):
        with make_context():
            module = ir.Module.parse(module)
    options = f"strict-conflicts={int(strict_conflicts)} check-each-step={int(check_each_step)}"
    with module.context:
        try:
            run_pipeline(module, f"slicer-propagate{{{options}}}")
        except ir.MLIRError as exc:
            raise CompileError(str(exc)) from None
    return module


BF16_UNIT_CHOICES = (AUTO, *BF16_UNITS)
"""What `compile(..., bf16_units=)` takes."""


def compile(module, *, mesh: Mesh | Mapping[str, int], tactics: Sequence[Tactic | Pipeline] = (),
            entry: str | None = None, source_name: str | None = None, strict: bool = False,
            bf16_units: str = "auto", buckets: int | str | None = None,
            collective_matmul: int | str | None = None) -> Program:
    """Partition `module` (text, IR, or an `ImportedProgram` from `slicer.from_torch`) over `mesh` (a `Mesh`,
    or `{axis: size}` as `apply_tactics` takes) with `tactics` (plus its IR annotations). Tactics refer to
    arguments by position, or by name when the program names them. `source_name` names the text's file in
    locations (provenance of collectives). Raises `CompileError`.

    A tactic whose split is lost (an op it should divide computed whole on every device, its value gathered:
    e.g. 6 heads on y=4) is a `DegradedStrategy` warning, listed by `explain()` too; with `strict`, a
    `TacticError`. `bf16_units`: the units contractions of bf16 operands run on, "auto" (the CPU's best) or one
    forced: "amx", "avx512bf16" or "f32" (docs/kernels.md, "Element types").

    The schedule's rewrites (docs/runtime.md, "Overlap"): `collective_matmul` splits a contraction whose partial
    sums are all_reduced into chunks whose collectives overlap the next chunk ("auto": where the cost model says
    it pays, "off", or a chunk count >= 2 wherever it fits); `buckets` combines all_reduces of gradients ("auto":
    the cost model's bucket size, "off", or a size in bytes). None: the defaults in the environment
    (docs/environment.md), else "auto". A bad value is an `OptionError`."""
    if bf16_units not in BF16_UNIT_CHOICES:
        raise CompileError(f"bf16_units must be one of {', '.join(BF16_UNIT_CHOICES)}, got {bf16_units!r}")
    if bf16_units != AUTO and BF16_UNITS.index(bf16_units) < BF16_UNITS.index(host_units()):
        raise CompileError(f"bf16_units={bf16_units!r}: this host's CPU has only {host_units()} for bf16 "
                           f"contractions (the kernels are compiled for it); use bf16_units={host_units()!r} or "
                           "'auto'")
    overlap = chunks_setting(collective_matmul), bucket_setting(buckets)
    try:
        mesh = Mesh.coerce(mesh)
    except MeshError as exc:
        raise CompileError(str(exc)) from None
    module, tactics = import_for_context(module, mesh, tactics)  # a ContextParallel: attention in blocks
    if any(isinstance(t, Pipeline) for t in tactics):  # MPMD: each stage's programs compiled here
        # a PipelineProgram (explain, memory, train): the one case compile gives no SPMD Program
        return compile_pipeline(module, mesh, next(t for t in tactics if isinstance(t, Pipeline)),  # type: ignore[return-value]
                                tactics, compile)
    given = tuple(t for t in tactics if not isinstance(t, Pipeline))  # all of them: no Pipeline here
    imported = module if isinstance(module, ImportedProgram) else None
    if imported is not None:
        original, entry, source_name = imported.text, entry or imported.entry, source_name or imported.source
        given = given + tuple(follow_arguments(imported, given))
    else:
        original = module if isinstance(module, str) else str(module)
    with make_context(), Progress(f"partitioning {source_name or 'the program'}", total=4) as progress:
        try:
            parsed = parse_source(original, source_name or "<text>")
            try:
                arg_names = tuple(value_names(entry_function(parsed, entry)))
            except EntryError:
                arg_names = ()  # apply_tactics reports it
            _check_static(parsed, entry, arg_names)
            progress.step("tactics")
            remats = [t for t in given if isinstance(t, Remat)]
            apply_tactics(parsed, tuple(t for t in given if not isinstance(t, Remat)), mesh=mesh, entry=entry)
            progress.step("propagation")
            run_pipeline(parsed, "slicer-propagate")
            propagation = explain_propagation(parsed)
            progress.step("partitioning")
            run_pipeline(parsed, "slicer-partition")
            before_remat = parsed.get_asm(enable_debug_info=True) if remats else None
            for tactic in remats:
                run_pipeline(parsed, remat_pipeline(tactic))
            _overlap_passes(parsed, *overlap)
            _say_degraded(parsed, strict)
        except ir.MLIRError as exc:
            raise CompileError(str(exc)) from None
        except CompileError:
            raise
        except SlicerError as exc:  # e.g. InvalidTactic: still a compile-time problem
            raise CompileError(str(exc)) from exc
        spmd = parsed.get_asm(enable_debug_info=True)  # keeps provenance locations
        progress.step("kernel graph")
        graph = replace(build_kernel_graph(spmd, entry), bf16_units=bf16_units)
    return Program(original, spmd, graph, propagation, arg_names, imported, before_remat)


def remat_pipeline(tactic: Remat) -> str:
    """The `slicer-remat` pass a `Remat` tactic runs after partitioning."""
    names = f" names={','.join(tactic.names)}" if tactic.names else ""
    return f"slicer-remat{{pattern={tactic.pattern} policy={tactic.policy}{names}}}"


def _overlap_passes(module: ir.Module, chunks: int | None, bucket: int | None) -> None:
    """The schedule's rewrites of the SPMD program, each unless it is off (None): contractions split so their
    collectives overlap (slicer-collective-matmul, `chunks`: 0 the cost model's choice), then all_reduces bucketed
    (slicer-bucket-collectives, `bucket`: 0 the cost model's size)."""
    if chunks is not None:
        run_pipeline(module, f"slicer-collective-matmul{{chunks={chunks}}}")
    if bucket is not None:
        run_pipeline(module, f"slicer-bucket-collectives{{bucket-bytes={bucket}}}")


def _say_degraded(module: ir.Module, strict: bool) -> None:
    """Warn of every degraded tactic the partitioner noted (`slicer.spmd.degraded`), once per cause (a tactic lost
    in every layer for one reason is one warning: `by_cause`), or raise with `strict`."""
    notes = by_cause([note for notes in report(module).degraded.values() for note in notes])
    if notes and strict:
        raise TacticError([Located(module.operation.location, f"{note} (strict=True: compile without it to accept "
                                                              "the replicated op, or change the tactic or mesh)")
                           for note in notes])
    for note in notes:
        warnings.warn(DegradedStrategy(note), stacklevel=3)


def _check_static(module: ir.Operation, entry: str | None, arg_names: tuple) -> None:
    """CompileError for a pipelined step's module, and unless every value of the entry function has a static shape:
    partitioned programs run on blocks of known sizes (buffers, collectives, kernels). Tactics and propagation
    alone accept dynamic dims (`slicer.apply_tactics`, `slicer.propagate` tile the static ones, never a dynamic one)."""
    refuse_pipelined_module(module)
    try:
        func = entry_function(module, entry)
    except EntryError:
        return  # apply_tactics reports it
    fn_type = function_type(func)
    for kind, types in (("argument", fn_type.inputs), ("result", fn_type.results)):
        for index, type_ in enumerate(types):
            if isinstance(type_, ir.ShapedType) and not type_.has_static_shape:
                name = f" ({arg_names[index]})" if kind == "argument" and index < len(arg_names) and arg_names[index] \
                    else ""
                raise CompileError(f"{kind} #{index}{name} of @{function_name(func)} has type {type_}: "
                                   f"{_DYNAMIC}")
    for op in walk_ops(func):
        for result in op.results:
            if isinstance(result.type, ir.ShapedType) and not result.type.has_static_shape:
                raise CompileError(f"{op.location}: '{op.name}' makes a {result.type}: {_DYNAMIC}")


_DYNAMIC = ("slicer.compile partitions and runs programs whose shapes are known (static): give the sizes (a "
            "model imported with slicer.from_torch has the example inputs' shapes). slicer.apply_tactics and "
            "slicer.propagate accept dynamic dims and tile the static ones only.")


__all__ = ["Program", "Timings", "apply_tactics", "compile", "propagate"]
