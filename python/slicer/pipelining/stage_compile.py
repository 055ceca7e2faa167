"""Compiling a training step under a `Pipeline` tactic (`slicer.compile(step, mesh=..., tactics=[Pipeline, ...])`).

1. The step is imported again by stage from the torch model it came from (`frontends.stages`): each virtual
   stage's forward, backward and update, and the transfers between stages. A `Remat` tactic is applied
   there, where each stage's forward and backward are cut apart (`frontends/stage_partition.py`): the forward
   saves what the policy keeps, the backward recomputes the rest.
2. The schedule (`mpmd.pipeline_schedule`) is built and verified.
3. Each stage program is compiled by `slicer.compile` for the mesh with the pipeline axis at size 1 (the
   devices of one stage), with the tactics that name its arguments (data parallel, ZeRO, Megatron on the
   other axes: the stage programs keep the step's names) and explicit crossing for every value that passes
   between programs (`stage_layouts.py`).
4. The pipelined module (`mpmd.stage_module`: one function per stage, `slicer.send` / `slicer.recv`) is
   built from the stage programs' signatures and lowered to each stage's instructions (`mpmd.instructions`),
   which checks that every transfer meets its peer and that nothing deadlocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir

from slicer.core import names as N
from slicer.core.errors import CompileError, InvalidTactic
from slicer.core.functions import entry_function, function_type
from slicer.core.mesh import Mesh
from slicer.core.operations import as_op
from slicer.dialect import make_context
from slicer.frontends import ImportedProgram
from slicer.frontends.stages import import_stages
from slicer.mpmd.instructions import lower_module
from slicer.mpmd.pipeline_schedule import make_schedule
from slicer.mpmd.stage_module import CalleeSignature, Link, StageFunctions, build_module
from slicer.strategies import check_remat
from slicer.tactics import Remat, Replicate, Tactic, Tile
from slicer.tactics.pipeline_tactic import Pipeline

from .pipeline_program import PipelineProgram
from .stage_layouts import check_passed_types, stage_tactics, tiles_of

KINDS = ("forward", "backward", "update")


def _signature(program: ImportedProgram) -> CalleeSignature:
    with make_context():
        module = ir.Module.parse(program.text)
        ftype = function_type(entry_function(module, program.entry))
        args = tuple(zip(program.arg_names, (str(t) for t in ftype.inputs)))
        results = tuple(zip(program.result_names, (str(t) for t in ftype.results)))
    return CalleeSignature(args, results)


def _compiled(program: ImportedProgram, mesh: Mesh, tactics: list[Tactic], forward, compile_program: Callable):
    """`program` compiled on `mesh` with `tactics`; a stage's `forward` (its StagePrograms, else None) again
    with its sent and saved results that came out as partial sums replicated (summed in the program: the
    stages exchange whole or tiled values only)."""
    prog = compile_program(program, mesh=mesh, tactics=tactics)
    if forward is None:
        return prog
    crossing = {*(t.name for t in forward.sent), *forward.saved}
    partial = [n for n, d in zip(program.result_names, prog.graph.result_dists) if n in crossing and d.partial]
    if not partial:
        return prog
    return compile_program(program, mesh=mesh, tactics=tactics + [Replicate(result=n) for n in partial])


def refuse_pipelined_module(module: ir.Module | ir.Operation) -> None:
    """CompileError if `module` is a pipelined step's module (`PipelineProgram.text`: a function per stage
    calling its stage's programs, which it only declares): it shows what the ranks run and cannot be compiled
    or run again from its text."""
    staged = [op for op in as_op(module).regions[0].blocks[0].operations if N.PIPELINE_STAGE_ATTR in op.attributes]
    if staged:
        raise CompileError(f"this is a pipelined step's module ({len(staged)} functions marked "
                           f"{N.PIPELINE_STAGE_ATTR}, their stages' programs only declared): it shows what the "
                           "ranks run and cannot be compiled or run from its text (nor by slicer-run). Compile the "
                           "training step with st.pipeline(...) in Python and run it with prog.session(ranks=N) or "
                           "prog.train(batches, ranks=N); to move its state, session.save(dir) and load the "
                           "checkpoint in a session of any program of the same step")


def compile_pipeline(step, mesh: Mesh, pipeline: Pipeline, tactics: Sequence[Tactic | Pipeline],
                     compile_program: Callable) -> PipelineProgram:
    """The pipelined program of `step` (module docstring); `compile_program(program, mesh=, tactics=)` is
    `slicer.compile`. InvalidTactic for a step that is not a torch training step, CompileError for a pipeline
    that does not fit the mesh."""
    if not isinstance(step, ImportedProgram) or step.origin is None:
        raise InvalidTactic("pipeline: the program must be a training step imported with slicer.training_step "
                            "(the stages are imported again from its torch model)")
    if not mesh.has_axis(pipeline.axis):
        raise CompileError(f"pipeline: unknown mesh axis '{pipeline.axis}' (the mesh has axes "
                            f"{', '.join(mesh.axis_names)})")
    count = mesh.size(pipeline.axis)
    virtual = count * pipeline.virtual_stages
    if pipeline.stages is not None and pipeline.stages != virtual:
        raise CompileError(f"pipeline: stages={pipeline.stages} but axis '{pipeline.axis}' has {count} devices"
                           + (f" and virtual_stages={pipeline.virtual_stages}" if pipeline.virtual_stages > 1
                              else "") + f": give stages={virtual}")
    if pipeline.split is not None and len(pipeline.split) + 1 != virtual:
        raise CompileError(f"pipeline: split={list(pipeline.split)} makes {len(pipeline.split) + 1} stages but "
                            f"axis '{pipeline.axis}' has {count} devices"
                            + (f" and virtual_stages={pipeline.virtual_stages}" if pipeline.virtual_stages > 1
                               else "") + f": give {virtual - 1} split points")
    schedule = make_schedule(pipeline.schedule, count, pipeline.microbatches, pipeline.virtual_stages)
    split = list(pipeline.split) if pipeline.split is not None else None
    remat = [t for t in tactics if isinstance(t, Remat)]
    for tactic in remat:
        check_remat(step, tactic, "pipeline")
    stages, transfers, points = import_stages(step.origin, split, pipeline.microbatches, virtual, remat)
    sub_mesh = Mesh([(a, 1 if a == pipeline.axis else s) for a, s in mesh.axes])
    others = [t for t in tactics if not isinstance(t, (Pipeline, Remat))]
    unknown = [t for t in others if not isinstance(t, (Tile, Replicate))]
    if unknown:
        raise CompileError(f"pipeline: {unknown[0]} cannot be combined with a pipeline yet (the values "
                           "passed between the stages' programs are tiled or replicated, nothing else)")
    compiled: dict = {}
    functions: list[StageFunctions] = []
    crossing: dict[str, list[Tactic]] = {}
    for stage in stages:
        for kind in KINDS:
            program = getattr(stage, kind)
            compiled[f"{kind}_{stage.index}"] = prog = _compiled(program, sub_mesh, stage_tactics(
                program, others, step.arg_names, crossing), stage if kind == "forward" else None, compile_program)
            if kind == "forward":
                for name in (*(t.name for t in stage.sent), *stage.saved):
                    at = program.result_names.index(name)
                    crossing[name] = tiles_of(name, prog.graph.result_dists[at])
        signatures = {kind: _signature(getattr(stage, kind)) for kind in KINDS}
        functions.append(StageFunctions(stage.index, signatures["forward"], signatures["backward"],
                                        signatures["update"], stage.batch, tuple(t.name for t in stage.received),
                                        tuple(t.name for t in stage.sent), stage.saved,
                                        (*stage.parameters, *stage.buffers),
                                        stage.state, stage.hyper))
    types = {name: typ for f in functions for name, typ in f.forward.results}
    links = tuple(Link(t.name, t.source, t.targets, types[t.name], t.differentiable) for t in transfers)
    text = build_module(schedule, tuple(functions), links, pipeline.axis)
    lowered = lower_module(text)
    check_passed_types(lowered, compiled)
    return PipelineProgram(step, mesh, pipeline, schedule, stages, compiled, text, lowered, points)


__all__ = ["compile_pipeline", "refuse_pipelined_module"]
