"""Strategies: the tactic lists of the usual ways to partition a training step (docs/tactics.md, "Strategies for
training steps").

A training step is an `ImportedProgram` whose arguments have roles (`arg_roles`: "input" for the batch,
"parameter", "buffer", "state" for optimizer state named `<kind>.<param>`, e.g. `exp_avg.fc1.weight`, and
`step`) and whose results are `loss`, then the new parameters and state under their arguments' names. Each
helper returns a plain list of `slicer.Tile` naming those arguments and results; lists compose by
concatenation, earlier strategies first (tactics are applied in order, docs/tactics.md "Composing strategies"):

    from slicer import strategies as st
    tp = st.megatron(step, "y", column=["*.fc1.*"], row=["*.fc2.weight"])
    tactics = st.data_parallel(step, "x") + tp + st.zero(step, "x", stage=3, mesh=mesh, after=tp)
    prog = slicer.compile(step, mesh=mesh, tactics=tactics)

Details: docs/module-notes.md, `strategies.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from mlir import ir

from slicer.core.errors import InvalidTactic, MeshError
from slicer.core.functions import EntryError, entry_function, function_type, value_names
from slicer.core.mesh import Mesh
from slicer.core.source_lines import module_path
from slicer.dialect import make_context, walk_ops
from slicer.frontends import ARG_ROLES, ImportedProgram
from slicer.spmd.rematerialize import unit_of
from slicer.tactics import Remat, Replicate, Tactic, Tile
from slicer.tactics.context_tactic import ContextParallel
from slicer.tactics.patterns import closest_hint, matching
from slicer.tactics.pipeline_tactic import Pipeline


@dataclass(frozen=True)
class _Step:
    """What the strategies read of a training step: names, roles and shapes of its arguments and results."""

    arg_names: tuple[str, ...]
    arg_roles: tuple[str, ...]
    arg_shapes: tuple[tuple[int, ...] | None, ...]
    result_names: tuple[str | None, ...]

    def names(self, role: str) -> list[str]:
        return [n for n, r in zip(self.arg_names, self.arg_roles) if r == role]

    def shape(self, name: str) -> tuple[int, ...] | None:
        return self.arg_shapes[self.arg_names.index(name)]

    def state_of(self, param: str) -> list[str]:
        """The optimizer state of `param`: the state arguments named `<kind>.<param>` (kind without dots)."""
        return [n for n in self.names("state") if n.partition(".")[2] == param]

    def tiles(self, names: Iterable[str], dims: Mapping[str, int], axes: tuple[str, ...]) -> list[Tactic]:
        """Tile dim `dims[name]` of each argument in `names`, then of each result of the same name."""
        names = list(names)
        tactics: list[Tactic] = [Tile(arg=n, dim=dims[n], axes=axes) for n in names]
        return tactics + [Tile(result=n, dim=dims[n], axes=axes) for n in names if n in self.result_names]


def _read_step(step, helper: str) -> _Step:
    """The names, roles and shapes of `step`; InvalidTactic unless it is an imported training step."""
    if not isinstance(step, ImportedProgram):
        raise InvalidTactic(f"strategies.{helper}: expected an imported training step (an ImportedProgram, e.g. from "
                            f"slicer.training_step), got {type(step).__name__}")
    if not step.arg_roles or len(step.arg_roles) != len(step.arg_names):
        raise InvalidTactic(f"strategies.{helper}: {step.source} is not a training step: its arguments have no roles "
                            f"({', '.join(ARG_ROLES)}); import the step with slicer.training_step, or build the "
                            "ImportedProgram with arg_roles")
    with make_context():
        try:
            # The module held in a variable while its function is read: the bindings do not keep a parsed module
            # alive for the ops found in it, and a collected module left `func` dangling (a segfault, found by the
            # fuzzer's training cases).
            module = ir.Module.parse(step.text)
            func = entry_function(module, step.entry)
        except (ir.MLIRError, EntryError) as exc:
            raise InvalidTactic(
                f"strategies.{helper}: cannot read the entry function of {step.source}: {exc}"
            ) from None
        shapes = tuple(tuple(t.shape) if isinstance(t, ir.RankedTensorType) and t.has_static_shape else None
                       for t in function_type(func).inputs)
        result_names: tuple[str | None, ...] = step.result_names or tuple(value_names(func, "result"))
    if len(shapes) != len(step.arg_names):
        raise InvalidTactic(f"strategies.{helper}: {step.source} names {len(step.arg_names)} arguments but its entry "
                            f"function @{step.entry} takes {len(shapes)}")
    return _Step(tuple(step.arg_names), tuple(step.arg_roles), shapes, tuple(result_names))


def _axes(axis, helper: str) -> tuple[str, ...]:
    axes = (axis,) if isinstance(axis, str) else tuple(axis) if isinstance(axis, (tuple, list)) else None
    if not axes or any(not isinstance(a, str) or not a for a in axes):
        raise InvalidTactic(f"strategies.{helper}: axis={axis!r} must be a mesh axis name (or a tuple of names, "
                            "major to minor)")
    return axes


def data_parallel(step: ImportedProgram, axis: str | Sequence[str]) -> list[Tactic]:
    """Data parallel over `axis`: every input of the step (the batch) tiled on dim 0; parameters, buffers and
    optimizer state replicated (they get no tactic, so strategies after this one may tile them)."""
    info, axes = _read_step(step, "data_parallel"), _axes(axis, "data_parallel")
    inputs = [n for n in info.names("input") if info.shape(n)]
    if not inputs:
        raise InvalidTactic(f"strategies.data_parallel: {step.source} has no input with a dim to split (inputs: "
                            f"{', '.join(info.names('input')) or 'none'})")
    return [Tile(arg=n, dim=0, axes=axes) for n in inputs]


def context_parallel(step: ImportedProgram, axis: str | Sequence[str], method: str = "ring", *,
                     dims: Mapping[str, int] | None = None) -> list:
    """Context parallelism over `axis`: the sequence of every input tiled over the axis, and attention computed
    over it by `method` (docs/tactics.md, "Context parallelism"). "ring": `F.scaled_dot_product_attention` as
    ring attention, each device keeping its queries while the keys and values travel around the axis block by
    block (training steps only: `slicer.compile` imports the step again with its attention in as many blocks as
    the axis has devices). "all_to_all" (DeepSpeed-Ulysses; any attention, forward programs too): each device
    computes attention over the whole sequence for its heads, q, k, v moved from sequence-tiled to head-tiled by
    all_to_all and the output back (`frontends/context_heads.py`; the heads must divide over the axis). The
    sequence dim of an input is the first dim after the batch of the length of dim 1 of the first input (`[B, S]`
    tokens and targets: 1; a padding mask `[B, 1, 1, S]`: 3); `dims` names others ({input name: dim}). Returns
    `[ContextParallel, Tile, ...]`. Composes by concatenation with the strategies of other axes."""
    info, axes = _read_step(step, "context_parallel"), _axes(axis, "context_parallel")
    context = ContextParallel(axes, method)  # checks the method
    if step.origin is None and method == "ring":
        raise InvalidTactic("strategies.context_parallel: expected a training step imported with "
                            "slicer.training_step (its attention is imported again in blocks)")
    inputs = [n for n in info.names("input") if len(info.shape(n) or ()) >= 2]
    if not inputs:
        raise InvalidTactic(f"strategies.context_parallel: {step.source} has no input with a sequence dim")
    length = (info.shape(inputs[0]) or ())[1]
    found = {n: next((d for d, size in enumerate(info.shape(n) or ()) if d and size == length), None) for n in inputs}
    found.update(dict(dims or {}))
    missing = [n for n, d in found.items() if d is None]
    if missing:
        raise InvalidTactic(f"strategies.context_parallel: no dim of length {length} (the sequence) in "
                            f"{', '.join(missing)}; give dims={{name: dim}}")
    return [context, *(Tile(arg=n, dim=d, axes=axes) for n, d in found.items() if d is not None)]


def zero(step: ImportedProgram, axis: str | Sequence[str], stage: int = 1, *,
         mesh: Mesh | Mapping[str, int] | None = None, after: Sequence[Tactic] = ()) -> list[Tactic]:
    """ZeRO over `axis`: data parallel, plus each parameter's optimizer state sharded (stages 1 and 2), plus
    the parameters themselves (stage 3, FSDP), arguments and results alike, on dim 0 (or, next to the tactics
    `after`, on the first dim they leave free). A dim the axis does not divide (GPT-2's 50257-row embedding) is
    cut into padded blocks of ceil(n/k) rows, as every tiled dim is; a dim of size 1 and 0-d state (`step`) stay
    replicated. `mesh`, when given, is checked to have the axis."""
    if stage not in (1, 2, 3) or isinstance(stage, bool):
        raise InvalidTactic(f"strategies.zero: stage={stage!r} must be 1, 2 or 3 (3 shards the parameters: FSDP)")
    info, axes = _read_step(step, "zero"), _axes(axis, "zero")
    _check_mesh(mesh, axes)
    taken = _tiled_dims(info, after, "zero")
    tactics = data_parallel(step, axes)
    sharded_args: dict[str, int] = {}
    for param in info.names("parameter"):
        dim = _free_dim(taken.get(param, {}), axes)
        if dim is None:
            continue
        values = ([param] if stage == 3 else []) + info.state_of(param)
        for name in values:
            shape, used = info.shape(name), taken.get(name, {})
            if shape and dim < len(shape) and shape[dim] > 1 and dim not in used and not set(axes) & _axes_of(used):
                sharded_args[name] = dim  # a dim the axis does not divide is cut into padded blocks
    ordered = [n for n in info.arg_names if n in sharded_args]  # parameters before state: the program's order
    tactics += info.tiles(ordered, sharded_args, axes)
    # Stages 1 and 2: a parameter updated on shards leaves whole (all-gathered), as it came in, unless the tactics
    # it comes after lay it out (their result tiles say where it goes).
    gathered = [p for p in info.names("parameter") if p not in sharded_args and p in info.result_names
                and not taken.get(p) and any(s in sharded_args for s in info.state_of(p))]
    return tactics + [Replicate(result=p) for p in gathered]


def megatron(step: ImportedProgram, axis: str | Sequence[str], column: Sequence[str] = (),
             row: Sequence[str] = ()) -> list[Tactic]:
    """Megatron tensor parallel over `axis`: parameters matching a `column` pattern tiled on dim 0 (output
    features of a torch [out, in] weight; their biases too when a pattern matches them), parameters matching a
    `row` pattern on dim 1 (input features; a 1-D parameter matching one, a row-parallel bias, stays
    replicated); their optimizer state and their results tiled the same way. Patterns are names or globs
    (`slicer.tactics.patterns`: `*` crosses dots) matched against the parameters' names; one that matches no
    parameter is an InvalidTactic naming the closest."""
    info, axes = _read_step(step, "megatron"), _axes(axis, "megatron")
    if isinstance(column, str) or isinstance(row, str):
        raise InvalidTactic("strategies.megatron: column= and row= take lists of patterns (column=['*.fc1.*'])")
    if not column and not row:
        raise InvalidTactic("strategies.megatron: give column= and/or row= patterns naming the parameters to split")
    params = info.names("parameter")
    chosen: dict[str, int] = {}
    for patterns, dim, kind in ((column, 0, "column"), (row, 1, "row")):
        for pattern in patterns:
            found = [params[i] for i in matching(pattern, params)]
            if not found:
                hint = closest_hint(pattern, params)
                raise InvalidTactic(f"strategies.megatron: the {kind} pattern {pattern!r} matches no parameter of "
                                    f"{step.source}{hint}; '*' matches any characters, dots included; parameters: "
                                    f"{', '.join(params)}")
            for name in found:
                if chosen.get(name, dim) != dim:
                    raise InvalidTactic(f"strategies.megatron: parameter {name!r} matches both a column and a row "
                                        "pattern; make the patterns disjoint")
                chosen[name] = dim
    dims: dict[str, int] = {}
    for param, dim in chosen.items():
        shape = info.shape(param) or ()
        if dim < len(shape):  # a 1-D parameter on a row pattern (a row-parallel bias) stays replicated
            dims[param] = dim
            dims.update({s: dim for s in info.state_of(param) if dim < len(info.shape(s) or ())})
    ordered = [n for n in info.arg_names if n in dims]
    return info.tiles(ordered, dims, axes)


def pipeline(step: ImportedProgram, axis: str, *, split: Sequence[str] | None = None, stages: int | None = None,
             microbatches: int, schedule: str = "1f1b", virtual_stages: int = 1) -> list[Tactic | Pipeline]:
    """Pipeline parallelism over `axis`: the step cut into stages, each on its own devices of the axis with its
    own parameters, optimizer state and update (docs/pipeline.md). `split` names the module that begins each
    later stage (torch's split points, `["blocks.4", "blocks.8"]`); the batch is cut into `microbatches`
    micro-batches (rows i, i + M, ...) whose gradients are accumulated, run in the order of `schedule`
    ("gpipe", "1f1b", or "interleaved" with `virtual_stages` > 1 chunks per stage). Returns `[Pipeline]`,
    which composes by concatenation with the strategies of the other axes (they lay out each stage's
    programs)."""
    if not isinstance(step, ImportedProgram) or step.origin is None:
        raise InvalidTactic("strategies.pipeline: expected a training step imported with slicer.training_step "
                            f"(its stages are imported again from the torch model), got {type(step).__name__}")
    return [Pipeline(axis, microbatches, split, stages, schedule, virtual_stages)]


def expert_parallel(step: ImportedProgram, axis: str | Sequence[str], experts: str = "blocks.*.moe.experts*", *,
                    mesh: Mesh | Mapping[str, int] | None = None, hidden_axis: str | None = None,
                    hidden: Mapping[str, int] | None = None) -> list[Tactic]:
    """Expert parallel over `axis`: the stacked expert weights (parameters matching the `experts` pattern, each
    [E, ...] with the experts on dim 0) tiled on dim 0, with their optimizer state and results, so each device
    holds E/n experts. Put it before `data_parallel` on the same axis (dp2ep): tactics apply in order, so the
    experts' einsums follow the experts and the group-tiled tokens move to them (and back) by all_to_all; after
    data parallel the experts would be all-gathered instead. An axis that does not divide E cuts the experts
    into padded blocks, as every tiled dim is. `mesh`, when given, is checked to have the axis. Megatron inside
    each expert: `hidden_axis` (another axis) with `hidden`, a pattern -> dim map naming the dim of each expert
    weight that holds the expert's hidden units F (`{"*.experts_w1": 2, "*.experts_w2": 1}` for [E, D, F] and
    [E, F, D]), tiles that dim (and its state's) over `hidden_axis` too."""
    info, axes = _read_step(step, "expert_parallel"), _axes(axis, "expert_parallel")
    params = info.names("parameter")
    found = [params[i] for i in matching(experts, params)] if isinstance(experts, str) else None
    if found is None:
        raise InvalidTactic(f"strategies.expert_parallel: experts={experts!r} must be a name or glob pattern")
    if not found:
        hint = closest_hint(experts, params)
        raise InvalidTactic(f"strategies.expert_parallel: the experts pattern {experts!r} matches no parameter of "
                            f"{step.source}{hint}; name the stacked expert weights ([E, ...]), e.g. "
                            f"experts='blocks.*.moe.experts*'; parameters: {', '.join(params)}")
    _axes_size(mesh, axes, "expert_parallel")
    listed = [n for n in found if _EXPERT_INDEX.search(n)]
    if listed:
        raise InvalidTactic(f"strategies.expert_parallel: {listed[0]!r} is a weight of one expert of an "
                            "nn.ModuleList (one module per expert, each on every device); expert parallel tiles "
                            "stacked expert weights [E, ...] on E. Import the step with the ModuleList's experts "
                            "stacked: slicer.training_step(..., stacked='blocks.*.moe.experts') (its path), or "
                            "stack the weights into one parameter per layer yourself, as "
                            "examples/torch/switch_moe.py does")
    for name in found:
        shape = info.shape(name) or ()
        if len(shape) < 2:
            raise InvalidTactic(f"strategies.expert_parallel: {name!r} (shape {list(shape)}) is not a stacked "
                                "expert weight [E, ...]; narrow the experts pattern to the [E, D, F] weights")
    dims = {n: 0 for p in found for n in [p, *info.state_of(p)] if len(info.shape(n) or ()) >= 1}
    tiles = info.tiles([n for n in info.arg_names if n in dims], dims, axes)
    return tiles + _expert_hidden(info, found, axes, hidden_axis, hidden, mesh)


def _expert_hidden(info: _Step, found: list[str], axes: tuple[str, ...], hidden_axis: str | None,
                   hidden: Mapping[str, int] | None, mesh) -> list[Tactic]:
    """The tiles of Megatron inside each expert: dim `hidden[pattern]` of each expert weight in `found` (and of
    its state) over `hidden_axis`; InvalidTactic for a pattern naming no expert weight, a weight no pattern
    names, a dim that is not an expert's own (0 or past the shape), or an axis the experts already use."""
    if hidden_axis is None and hidden is None:
        return []
    if hidden_axis is None or not isinstance(hidden, Mapping) or not hidden:
        raise InvalidTactic("strategies.expert_parallel: Megatron inside each expert takes both hidden_axis= (a "
                            "mesh axis) and hidden= (pattern -> the dim of the expert weight holding its hidden "
                            "units, e.g. {'*.experts_w1': 2, '*.experts_w2': 1})")
    inner = _axes(hidden_axis, "expert_parallel")
    if set(inner) & set(axes):
        raise InvalidTactic(f"strategies.expert_parallel: hidden_axis={hidden_axis!r} is an axis the experts are "
                            "spread over; tile the experts' hidden units over another axis")
    _axes_size(mesh, inner, "expert_parallel")
    dims: dict[str, int] = {}
    for pattern, dim in hidden.items():
        named = [found[i] for i in matching(pattern, found)]
        if not named:
            raise InvalidTactic(f"strategies.expert_parallel: the hidden pattern {pattern!r} matches no expert "
                                f"weight; expert weights: {', '.join(found)}")
        for name in named:
            rank = len(info.shape(name) or ())
            if not isinstance(dim, int) or not 0 < dim < rank:
                raise InvalidTactic(f"strategies.expert_parallel: hidden dim {dim!r} of {name!r} (shape "
                                    f"{list(info.shape(name) or ())}) is not one of an expert's own dims (1 to "
                                    f"{rank - 1}; dim 0 indexes the experts)")
            dims.update({n: dim for n in [name, *info.state_of(name)] if len(info.shape(n) or ()) == rank})
    missing = [n for n in found if n not in dims]
    if missing:
        raise InvalidTactic(f"strategies.expert_parallel: no hidden pattern names {missing[0]!r}; give each expert "
                            "weight the dim of its hidden units")
    return info.tiles([n for n in info.arg_names if n in dims], dims, inner)


_EXPERT_INDEX = re.compile(r"(^|\.)[^.]*experts?[^.]*\.\d+\.", re.IGNORECASE)
"""A ModuleList of experts' index in a parameter's name (`moe.experts.3.w1.weight`)."""


def _axes_size(mesh, axes: tuple[str, ...], helper: str) -> int | None:
    """The number of devices along `axes` of `mesh` (None: no mesh given); InvalidTactic for an unknown axis
    (`_check_mesh` says zero's name in its messages)."""
    if mesh is None:
        return None
    try:
        mesh = mesh if isinstance(mesh, Mesh) else Mesh(mesh)
    except MeshError as exc:
        raise InvalidTactic(f"strategies.{helper}: mesh={mesh!r}: {exc}") from None
    size = 1
    for axis in axes:
        if not mesh.has_axis(axis):
            raise InvalidTactic(f"strategies.{helper}: unknown mesh axis '{axis}' (the mesh has axes "
                                f"{', '.join(mesh.axis_names)})")
        size *= mesh.size(axis)
    return size


def remat(step: ImportedProgram, pattern: str = "blocks.*", policy: str = "full",
          names: Sequence[str] = ()) -> list[Tactic]:
    """Rematerialisation: the forward computation of the modules whose paths match `pattern` (`blocks.*`: each
    of the model's blocks; `*` crosses dots) recomputed in the backward pass instead of kept, saving what
    `policy` says: "full" (each module's inputs and outputs only), "save_dots" (the linear layers' matmul results too),
    "save_names" (the values of the modules `names` match too), "none" (everything). One `Remat` tactic,
    composed with the others by concatenation (docs/remat.md). InvalidTactic when `pattern` names no module of
    the step (the closest named), or for a bad policy."""
    tactic = Remat(pattern=pattern, policy=policy, names=tuple(names))
    check_remat(step, tactic)
    return [tactic]


def check_remat(step: ImportedProgram, tactic: Remat, helper: str = "strategies.remat") -> None:
    """InvalidTactic when the pattern of `tactic` matches no module of `step` (the closest named)."""
    paths = _module_paths(step)
    if not any(unit_of(path, tactic.pattern) for path in paths):
        hint = closest_hint(tactic.pattern, sorted({p for path in paths for p in _prefixes(path)}))
        raise InvalidTactic(f"{helper}: the pattern {tactic.pattern!r} matches no module of {step.source}{hint}; "
                            "'*' matches any characters, dots included (e.g. 'blocks.*')")


def remat_plans(step: ImportedProgram) -> list[Remat]:
    """The remat tactics `slicer.auto` prices and chooses among when its budget requires remat, cheapest
    recomputation first: `save_dots`, then `full`, on the step's repeated modules (the children of a module list
    with numbered entries, `blocks.0`, `blocks.1`, ...: `blocks.*`); none for a step without them."""
    numbered: dict[str, set[str]] = {}
    for path in _module_paths(step):
        parts = path.split(".")
        for n in range(1, len(parts)):
            if parts[n].isdigit():
                numbered.setdefault(".".join(parts[:n]), set()).add(parts[n])
                break
    lists = [prefix for prefix, entries in numbered.items() if len(entries) > 1]
    return [Remat(pattern=f"{prefix}.*", policy=policy) for policy in ("save_dots", "full") for prefix in lists[:1]]


def _module_paths(step: ImportedProgram) -> set[str]:
    """The module paths the ops of `step` were computed in (`blocks.0.attn.q`; set at import)."""
    if not isinstance(step, ImportedProgram):
        raise InvalidTactic("strategies.remat: expected an imported training step (an ImportedProgram, e.g. from "
                            f"slicer.training_step), got {type(step).__name__}")
    with make_context():
        module = ir.Module.parse(step.text)
        return {p for p in (module_path(op.location) for op in walk_ops(module.operation)) if p}


def _prefixes(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1)]


def follow_arguments(step: ImportedProgram, tactics: Sequence[Tactic]) -> list[Tactic]:
    """The tactics that lay out each result named like an argument (the next value of a parameter or of
    optimizer state) as that argument, for every such result no tactic in `tactics` names: the argument's tiles
    copied to the result, or `Replicate(result=...)` when no tactic tiles the argument. `slicer.compile` adds
    them for a program whose results are named, so a result replaces its argument in place, block for block,
    on every rank of a session (`Program.session`), whatever tactics the user wrote. An argument no tactic names
    is replicated too (`Replicate(arg=...)`): left free, propagation may give it the layout of the op that
    reads it (a LayerNorm's weight after a column-parallel linear), which its replicated result would not
    have. Positions and patterns in `tactics` are resolved on the step's names."""
    if not step.result_names:
        return []
    arg_names, result_names = tuple(step.arg_names), tuple(step.result_names)
    named_results: set[int] = set()
    named_args: set[int] = set()
    arg_tiles: dict[int, list[Tile]] = {}
    for tactic in tactics:
        if isinstance(tactic, Remat):
            continue  # places no value
        target = tactic.result if tactic.result is not None else None
        if target is not None:
            named_results.update([target] if isinstance(target, int) else matching(target, result_names))
        elif tactic.arg is not None:
            for index in [tactic.arg] if isinstance(tactic.arg, int) else matching(tactic.arg, arg_names):
                named_args.add(index)
                if isinstance(tactic, Tile):
                    arg_tiles.setdefault(index, []).append(tactic)
    follow: list[Tactic] = []
    for index, name in enumerate(result_names):
        if index in named_results or name not in arg_names:
            continue
        arg = arg_names.index(name)
        tiles = arg_tiles.get(arg, [])
        follow += [Tile(result=name, dim=t.dim, axes=t.axes) for t in tiles] if tiles else [Replicate(result=name)]
        if arg not in named_args:
            follow.append(Replicate(arg=name))
    return follow


def _check_mesh(mesh, axes: tuple[str, ...]) -> None:
    """InvalidTactic unless `mesh` (None: not given) is a mesh with every axis of `axes`."""
    if mesh is None:
        return
    try:
        mesh = mesh if isinstance(mesh, Mesh) else Mesh(mesh)
    except MeshError as exc:
        raise InvalidTactic(f"strategies.zero: mesh={mesh!r}: {exc}") from None
    for axis in axes:
        if not mesh.has_axis(axis):
            raise InvalidTactic(f"strategies.zero: unknown mesh axis '{axis}' (the mesh has axes "
                                f"{', '.join(mesh.axis_names)})")


def _tiled_dims(info: _Step, tactics: Sequence[Tactic], helper: str) -> dict[str, dict[int, tuple[str, ...]]]:
    """Argument name -> {dim: axes} that `tactics` tile (names, patterns and positions resolved on the step)."""
    taken: dict[str, dict[int, tuple[str, ...]]] = {}
    for tactic in tactics:
        if not isinstance(tactic, Tile) or tactic.arg is None:
            continue  # results follow their arguments here; a Replicate leaves every dim free
        if isinstance(tactic.arg, int):
            names = [info.arg_names[tactic.arg]] if tactic.arg < len(info.arg_names) else []
        else:
            names = [info.arg_names[i] for i in matching(tactic.arg, info.arg_names)]
        if not names:
            raise InvalidTactic(f"strategies.{helper}: after= holds {tactic}, which names no argument of the step")
        for name in names:
            taken.setdefault(name, {})[tactic.dim] = tuple(tactic.axes)
    return taken


def _axes_of(dims: Mapping[int, tuple[str, ...]]) -> set[str]:
    return {a for axes in dims.values() for a in axes}


def _free_dim(used: Mapping[int, tuple[str, ...]], axes: tuple[str, ...]) -> int | None:
    """The dim a parameter is sharded on: 0, or the first dim `used` leaves free; None when `used` already
    tiles it over one of `axes`."""
    if set(axes) & _axes_of(used):
        return None
    dim = 0
    while dim in used:
        dim += 1
    return dim


__all__ = ["data_parallel", "follow_arguments", "megatron", "pipeline", "remat", "remat_plans", "zero"]


__all__ = ["check_remat", "data_parallel", "expert_parallel", "follow_arguments", "megatron", "pipeline", "remat",
           "remat_plans", "zero"]
