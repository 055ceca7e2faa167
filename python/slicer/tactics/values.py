"""Tactics: the user's partitioning requests, as immutable values (docs/tactics.md).

A tactic says, for one function argument or result (referred to by position,
or by name when the program names its arguments: imported models do, with
their parameters' dotted names, and hand-written IR can with the `slicer.name`
argument or result attribute), either "tile dim `d` over mesh axes `a...`" (`Tile`) or
"keep it replicated" (`Replicate`). A name with `*`, `?` or `[` is a pattern
(`slicer.tactics.patterns`: shell-style, `*` crossing dots) and stands for one such
tactic on every argument (or result) whose name matches, in order. A schedule is an ordered sequence of tactics applied
one by one by `slicer.apply_tactics`, which rewrites the program into an *equal* program
with `slicer.loop`/`slicer.slice` (see `slicer.tactics.rewrite` for the exact
rewrite). The same requests can be written in the IR (`slicer.sharding` on
function arguments/results, `slicer.annotate` on any value) or on the command
line (`slicer-apply-tactics{tactics=arg0.1=y;result0.0=x,y;arg2=replicated}`,
by name `mlp.fc1.weight.0=y;mlp.fc1.bias=replicated;result:exp_avg.*.0=x`); all three front doors
produce the same tactic values.

Details: docs/module-notes.md, `tactics/values.py`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from slicer.core.errors import InvalidTactic

from .patterns import matches

AxisNames = tuple[str, ...]


def _check_index(tactic: str, name: str, value) -> None:
    if value is None:
        return
    if isinstance(value, str):
        if not value or any(c in value for c in "=;") or value != value.strip():
            raise InvalidTactic(f"{tactic}: {name}={value!r} must be a non-empty name without '=', ';' or "
                                "surrounding spaces (or a position, an int >= 0)")
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidTactic(f"{tactic}: {name}={value!r} must be a position (an int >= 0, counted from 0) or the "
                            f"name of a function {name} (e.g. a model parameter's, 'mlp.fc1.weight')")


def _check_target(tactic: Tile | Replicate) -> None:
    if (tactic.arg is None) == (tactic.result is None):
        raise InvalidTactic(f"{tactic}: give exactly one of arg= or result= "
                            "(the position of the function argument or result it applies to)")
    _check_index(str(tactic), "arg", tactic.arg)
    _check_index(str(tactic), "result", tactic.result)


def _target_text(tactic: Tile | Replicate) -> list[str]:
    parts = []
    if tactic.arg is not None:
        parts.append(f"arg={tactic.arg!r}")
    if tactic.result is not None:
        parts.append(f"result={tactic.result!r}")
    return parts


@dataclass(frozen=True, kw_only=True)
class Tile:
    """Tile dim `dim` of function argument `arg` (or result `result`) over mesh `axes`.

    `arg`/`result` is a position or, for a program whose arguments carry names, a name
    (`Tile(arg="mlp.fc1.weight", dim=0, axes="y")`) or a pattern naming several
    (`Tile(result="exp_avg.*", dim=0, axes="x")`, see `slicer.tactics.patterns`). `axes` is one axis name or several,
    major to minor: `Tile(arg=0, dim=0, axes=("x", "y"))` cuts dim 0 into |x|*|y| blocks, block
    `idx(x) * |y| + idx(y)` on device (x, y).
    """

    arg: int | str | None = None
    result: int | str | None = None
    dim: int
    axes: str | AxisNames

    def __post_init__(self) -> None:
        axes = (self.axes,) if isinstance(self.axes, str) else self.axes
        try:
            axes = tuple(axes)
        except TypeError:
            raise InvalidTactic(f"{self}: axes must be an axis name or a sequence of names, major to minor") from None
        object.__setattr__(self, "axes", axes)
        _check_target(self)
        if isinstance(self.dim, bool) or not isinstance(self.dim, int) or self.dim < 0:
            raise InvalidTactic(f"{self}: dim={self.dim!r} must be an int >= 0 (dims are counted from 0)")
        if not axes:
            raise InvalidTactic(f"{self}: give at least one mesh axis (use Replicate to keep a value whole)")
        for axis in axes:
            if not isinstance(axis, str) or not axis:
                raise InvalidTactic(f"{self}: axis {axis!r} must be a non-empty mesh axis name")
        for axis in axes:
            if axes.count(axis) > 1:
                raise InvalidTactic(f"{self}: axis '{axis}' is listed twice; a dim is tiled by each axis at most once")

    @property
    def axis_names(self) -> AxisNames:
        """`axes` as the tuple of names it is once made (`__post_init__`: one name given is a tuple of one)."""
        return (self.axes,) if isinstance(self.axes, str) else self.axes

    def __repr__(self) -> str:
        axes = self.axes[0] if isinstance(self.axes, tuple) and len(self.axes) == 1 else self.axes
        return f"Tile({', '.join(_target_text(self) + [f'dim={self.dim!r}', f'axes={axes!r}'])})"

    __str__ = __repr__


@dataclass(frozen=True, kw_only=True)
class Replicate:
    """Keep function argument `arg` (or result `result`) whole on every device (a position, a name or a
    pattern, as for `Tile`).

    Recorded in the IR as a `slicer.annotate` with an all-empty sharding so later
    passes see the requirement; it creates no loop.
    """

    arg: int | str | None = None
    result: int | str | None = None

    def __post_init__(self) -> None:
        _check_target(self)

    def __repr__(self) -> str:
        return f"Replicate({', '.join(_target_text(self))})"

    __str__ = __repr__


REMAT_POLICIES = ("full", "save_dots", "save_names", "none")


@dataclass(frozen=True, kw_only=True)
class Remat:
    """Recompute the forward computation of the modules whose paths match `pattern` (`blocks.*`: every block;
    see `slicer.tactics.patterns`) in the backward pass instead of keeping it (docs/remat.md). `policy`: what
    each module still saves, "full" (its inputs and outputs only), "save_dots" (the linear layers' matmul
    results too: contractions without batch dims),
    "save_names" (the values computed by the modules `names` match too) or "none" (everything: no remat).
    Applied after partitioning, by `slicer-remat`; it does not place values, so it composes with every tactic."""

    pattern: str
    policy: str = "full"
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", (self.names,) if isinstance(self.names, str) else tuple(self.names))
        if not isinstance(self.pattern, str) or not self.pattern or any(c in self.pattern for c in "=;,"):
            raise InvalidTactic(f"{self}: pattern={self.pattern!r} must be a module path or pattern without '=', "
                                "';' or ',' (e.g. 'blocks.*')")
        if self.policy not in REMAT_POLICIES:
            raise InvalidTactic(f"{self}: policy={self.policy!r} must be one of {', '.join(REMAT_POLICIES)}")
        if (self.policy == "save_names") != bool(self.names):
            raise InvalidTactic(f"{self}: names= (module paths or patterns whose values are saved, e.g. "
                                "['blocks.*.attn.q']) go with policy='save_names', and it needs them")
        for name in self.names:
            if not isinstance(name, str) or not name or any(c in name for c in "=;,()"):
                raise InvalidTactic(f"{self}: name {name!r} must be a module path or pattern")

    def __repr__(self) -> str:
        names = f", names={list(self.names)!r}" if self.names else ""
        return f"Remat(pattern={self.pattern!r}, policy={self.policy!r}{names})"

    __str__ = __repr__


def remat_keeps(policy: str, names: Iterable[str], path: str | None, *, contraction: bool, batched: bool) -> bool:
    """Whether remat `policy` keeps (saves for the backward rather than recomputes) a value computed inside a
    recomputed module, by the module that computed it (`path`, e.g. `blocks.0.attn.c_proj`) and the op: a
    contraction (a matmul in any form), `batched` when a loop dim walks its operands and result (attention's
    `q @ k^T` per head, recomputed) rather than a linear layer's against a weight (kept by save_dots); `names`:
    save_names' patterns. "full" keeps nothing inside the module (only what reaches it: its inputs). The one
    definition of the policies, read by `slicer-remat` on the IR's linalg ops and by a pipeline's stage
    partition on aten ops (`frontends/stage_partition.py`). Whatever the policy, a module's outputs (read by the
    forward outside it) and collectives' results are kept."""
    if policy == "save_dots":
        return contraction and not batched
    if policy == "save_names":
        return path is not None and any(matches(n, path) for n in names)
    return policy == "none"


Tactic = Tile | Replicate | Remat

# ----------------------------------------------------------------------------- text form

_REMAT = re.compile(r"^remat:([^=]+?)=(\w+)(?:\(([^)]*)\))?$")
_ITEM = re.compile(r"^(?:(arg|result)(\d+)|(?:(arg|result):)?([^=]+?))(?:\.(\d+))?=(.*)$")
_POSITIONAL = re.compile(r"^(arg|result)\d+(\.|$)")
_PREFIXES = ("arg:", "result:")
TEXT_SYNTAX = ("argI.D=AXES (tile dim D of argument I over AXES, comma-separated, major to minor), "
               "resultI.D=AXES, argI=replicated or resultI=replicated, or NAME.D=AXES / NAME=replicated for an "
               "argument named NAME and result:NAME.D=AXES / result:NAME=replicated for a result (NAME may be a "
               "pattern: *, ?, [seq]), or remat:MODULES=POLICY (POLICY full, save_dots, none, or "
               "save_names(NAME,...)), separated by ';' "
               "(e.g. arg0.1=y;result0.0=x,y;arg2=replicated;fc1.weight.0=y;result:exp_avg.*.0=x;remat:blocks.*=full)")


def parse_tactics(text: str) -> tuple[Tactic, ...]:
    """`"arg0.1=y;result0.0=x,y;arg2=replicated"` -> the tactic values, in order.

    An item whose target is not `argI`/`resultI` names an argument: `mlp.fc1.weight.0=y` tiles dim 0 of the
    argument named `mlp.fc1.weight` (the last `.D` before `=` is the dim), `mlp.fc1.bias=replicated`; prefixed
    with `result:` it names a result (`result:exp_avg.*.0=x`), and `arg:` says "argument" explicitly (needed only
    for a name that looks like a position or starts with a prefix). A name may be a pattern.
    Raises InvalidTactic naming the item that does not parse and the syntax.
    """
    tactics: list[Tactic] = []
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        remat = _REMAT.match(item)
        if remat is not None:
            pattern, policy, names = remat.groups()
            listed = tuple(n.strip() for n in names.split(",")) if names is not None else ()
            tactics.append(_build(item, Remat, {}, pattern=pattern.strip(), policy=policy, names=listed))
            continue
        match = _ITEM.match(item)
        if match is None:
            raise InvalidTactic(f"cannot parse tactic '{item}': expected {TEXT_SYNTAX}")
        kind, index, prefix, name, dim, value = match.groups()
        replicated = value.strip() in ("replicated", "replicate")
        if name is not None:
            name = name.strip()
            if prefix is None and _POSITIONAL.match(name):  # `arg0.x=y`: positional syntax gone wrong, not a name
                raise InvalidTactic(f"cannot parse tactic '{item}': expected {TEXT_SYNTAX}")
            if replicated and dim is not None:
                name, dim = f"{name}.{dim}", None  # `layers.0=replicated`: the whole left side is the name
            kind = prefix or "arg"
            target, shown = {kind: name}, _named_target(kind, name)
        else:
            target, shown = {kind: int(index)}, f"{kind}{index}"
        if replicated:
            if dim is not None:
                raise InvalidTactic(f"tactic '{item}': a replicated value has no dim; write {shown}=replicated")
            tactics.append(_build(item, Replicate, target))
            continue
        if dim is None:
            raise InvalidTactic(f"tactic '{item}': say which dim to tile ({shown}.D={value}) "
                                f"or write {shown}=replicated")
        axes = tuple(a.strip() for a in value.split(","))
        if any(not a for a in axes):
            raise InvalidTactic(f"tactic '{item}': empty axis name; list mesh axes separated by ','")
        tactics.append(_build(item, Tile, target, dim=int(dim), axes=axes))
    return tuple(tactics)


def _named_target(kind: str, name: str) -> str:
    """The text of a target given by name: `NAME` for an argument (`arg:NAME` where `NAME` alone would read as a
    position or a prefixed name), `result:NAME` for a result."""
    if kind == "result":
        return f"result:{name}"
    if _POSITIONAL.match(name) or name.startswith(_PREFIXES):
        return f"arg:{name}"
    return name


def _build(item: str, kind, target: dict, **fields) -> Tactic:
    try:
        return kind(**target, **fields)
    except InvalidTactic as exc:
        raise InvalidTactic(f"tactic '{item}': {exc}") from None


def format_tactics(tactics: Iterable[Tactic]) -> str:
    """The text form of `tactics` (inverse of `parse_tactics`)."""
    items = []
    for tactic in tactics:
        if isinstance(tactic, Remat):
            names = f"({','.join(tactic.names)})" if tactic.names else ""
            items.append(f"remat:{tactic.pattern}={tactic.policy}{names}")
            continue
        kind, index = ("arg", tactic.arg) if tactic.arg is not None else ("result", tactic.result)
        target = _named_target(kind, index) if isinstance(index, str) else f"{kind}{index}"
        if isinstance(tactic, Replicate):
            items.append(f"{target}=replicated")
        else:
            items.append(f"{target}.{tactic.dim}={','.join(tactic.axes)}")
    return ";".join(items)


__all__ = [
    "REMAT_POLICIES", "Remat", "Replicate", "Tactic", "Tile", "TEXT_SYNTAX", "format_tactics", "parse_tactics",
    "remat_keeps",
]
