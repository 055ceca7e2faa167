"""The layouts of the values that pass between a stage's programs and between stages, made explicit.

A stage's forward, backward and update are compiled one by one, and the runtime hands each one's blocks to the
next as they are (a rank's block of a parameter, of a received activation, of an accumulated gradient): every
value that crosses between programs must therefore have the same distributed type where it is made and where it
is read. So each stage program gets, besides the tactics of the step that name its arguments (data parallel,
ZeRO, Megatron over the other axes):

- each argument no tactic names: replicated, except an accumulated gradient `grad.<p>`, laid out as `p`, and a
  received value or its gradient, laid out as the sending stage's forward made it (that forward is compiled
  first; its result's distributed type is read back and written as tiles);
- the loss: replicated; a received value's gradient (a backward's result): as the value; an accumulated
  gradient (a backward's result): as its parameter;
- a value the forward sends or saves and that its partitioned program would return as a partial sum: replicated
  (summed in the forward, `stage_compile.py`).
`check_passed_types` then checks both ends of every value passed between a stage's programs.
"""

from __future__ import annotations

from collections.abc import Sequence

from slicer.core.errors import CompileError
from slicer.frontends import ImportedProgram
from slicer.frontends.stage_programs import GRAD
from slicer.tactics import Replicate, Tactic, Tile
from slicer.tactics.patterns import is_pattern, matching


def tiles_of(name: str, dist, *, result: bool = False) -> list[Tactic]:
    """Tactics laying out argument (or result) `name` as the distributed type `dist`."""
    if dist.partial:
        raise CompileError(f"pipeline: {name} crosses between stages as a partial sum over "
                           f"{', '.join(dist.partial)}; the stages can only exchange whole or tiled values")
    key = "result" if result else "arg"
    tiles: list[Tactic] = [Tile(**{key: name}, dim=d, axes=tuple(reversed(axes)))
                           for d, axes in enumerate(dist.dims) if axes]
    return tiles or [Replicate(**{key: name})]


def _named(tactics: Sequence[Tactic], names: Sequence[str], results: bool) -> dict[str, list[Tactic]]:
    """Name -> the tactics (of `tactics`) on that argument (or result) among `names` (a plain name looked up, not
    compared with every name: the step's tactics name each of its hundreds of arguments)."""
    found: dict[str, list[Tactic]] = {}
    positions: dict[str, list[int]] = {}
    for index, name in enumerate(names):
        positions.setdefault(name, []).append(index)
    for tactic in tactics:
        target = getattr(tactic, "result" if results else "arg", None)
        if target is None:
            continue
        indexes = [target] if isinstance(target, int) else matching(target, names) if is_pattern(target) \
            else positions.get(target, [])
        for index in indexes:
            if 0 <= index < len(names):
                found.setdefault(names[index], []).append(tactic)
    return found


def _as(tactics: list[Tactic], name: str, *, result: bool = False) -> list[Tactic]:
    """`tactics` (on some value) retargeted to argument (or result) `name`."""
    key = "result" if result else "arg"
    moved: list[Tactic] = [Tile(**{key: name}, dim=t.dim, axes=t.axes) for t in tactics if isinstance(t, Tile)]
    return moved or [Replicate(**{key: name})]


def stage_tactics(program: ImportedProgram, user: Sequence[Tactic], step_names: Sequence[str],
                  transfers: dict[str, list[Tactic]]) -> list[Tactic]:
    """The tactics `program` is compiled with (module docstring). `user`: the step's tactics over the other
    axes; `step_names`: the step's argument names they were written for; `transfers`: transfer name -> the
    tactics laying it out as an argument (those known so far)."""
    on_step = _named(user, list(step_names), False)
    on_args = _named(user, list(program.arg_names), False)
    tactics = [t for name in program.arg_names for t in on_args.get(name, [])]
    tactics += [t for name in program.result_names for t in _named(user, list(program.result_names),
                                                                          True).get(name, [])]
    tactics = list(dict.fromkeys(tactics))
    for name in program.arg_names:
        if name in on_args:
            continue
        base = name[len(GRAD):] if name.startswith(GRAD) else name
        if base in transfers:
            tactics += _as(transfers[base], name)
        elif name.startswith(GRAD) and base in on_step:
            tactics += _as(on_step[base], name)
        else:
            tactics.append(Replicate(arg=name))
    for name in program.result_names:
        base = name[len(GRAD):] if name.startswith(GRAD) else name
        if name == "loss":
            tactics.append(Replicate(result=name))
        elif name.startswith(GRAD) and base in transfers:
            tactics += _as(transfers[base], name, result=True)
        elif name.startswith(GRAD) and base in on_step:
            tactics += _as(on_step[base], name, result=True)
    return tactics


def check_passed_types(stages, programs: dict) -> None:
    """CompileError unless every value one of a stage's programs returns and another reads (`stages`: the
    lowered stages, `mpmd.instructions`; `programs`: callee -> compiled program) has the same distributed type
    at both ends: the runtime hands each rank's block over as it is."""
    for stage in stages:
        made: dict[int, tuple[str, int]] = {}
        first: dict[int, tuple[str, int, object]] = {}  # a stage argument -> its first reader and its layout there
        for ins in stage.instructions:
            if ins["op"] != "call":
                continue
            graph = programs[ins["callee"]].graph
            for position, value in enumerate(ins["operands"]):
                dist = graph.values[graph.args[position]].dist
                if value < len(stage.args):
                    callee, at, seen = first.setdefault(value, (ins["callee"], position, dist))
                    if seen != dist:
                        raise CompileError(f"pipeline: stage {stage.index} reads its argument {stage.args[value]} "
                                           f"as {seen} in {callee} and as {dist} in {ins['callee']} (an argument "
                                           "a program does not use is left replicated there); the stage's ranks "
                                           "hold one block of it: such a combination cannot be pipelined yet")
                if value not in made:
                    continue
                source, at = made[value]
                given, wanted = programs[source].graph.result_dists[at], graph.values[graph.args[position]].dist
                if given != wanted:
                    raise CompileError(f"pipeline: stage {stage.index} passes result #{at} of {source} ({given}) "
                                       f"to {ins['callee']} as argument #{position}, which takes {wanted}; "
                                       "lay out the value alike in both (a tactic on the step's argument)")
            made.update({value: (ins["callee"], at) for at, value in enumerate(ins["results"])})


__all__ = ["check_passed_types", "stage_tactics", "tiles_of"]
