"""Which value the user means, what to call it, and what it is globally.

A compiled program's values are the kernel graph's (`%0`, `%1`, ...: arguments first, then what kernels and
collectives produce; `Program.explain()` lists them). Users also know their own names: the SSA names of the
source (`%w1`, `%y`), recovered from the locations the kernel graph keeps (`Value.loc`, `file:line:col` of the
argument or defining op) and the source text. `resolve` accepts, in this order:

- an `int` i: argument #i;
- `"arg1"` / `"result0"`: argument #1 / result #0;
- a kernel-graph name (`"%4"`);
- a source name: an argument's or result's own name (`slicer.name`: a model's `"x"`, `"fc1.weight"`), or an
  SSA name with or without `%` (`"w1"`, `"%y"`).

`global_type` gives the distributed type a picture should draw. A value computed in a loop body (`varying`
axes) is typed per member of the loop's family; when a collective consumes it, its block is that collective's
input block, whose global type is the step's type before (the loop's result type, e.g. the partial sums of a
`sum` loop before their `all_reduce`), obtained by inverting the step's typing rule.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slicer.core.errors import VizError
from slicer.lowering import CollectiveNode, KernelGraph
from slicer.redistribution import DistType, type_before

_DEF = re.compile(r"(%[A-Za-z0-9_$.-]+)\s*=\s*$")
_ARG = re.compile(r"%[A-Za-z0-9_$.-]+")
_INDEXED = re.compile(r"^\s*(arg|argument|result)\s*#?\s*(\d+)\s*$")


def source_names(graph: KernelGraph, source: str, arg_names=(), result_names=()) -> dict[str, str]:
    """Kernel-graph value name -> its name in the source: the name the program gives an argument or result
    (`arg_names`, `result_names`: its `slicer.name`, e.g. a model's `"self_attn.q_proj.weight"` or input `"x"`),
    else its SSA name in `source` (e.g. `"%1": "%w1"`), where its location says."""
    found = _ssa_names(graph, source) if source else {}
    for values, given in ((graph.args, arg_names), (graph.results, result_names)):
        for name, label in zip(values, given or ()):
            if label:
                found[name] = label
    return found


def _ssa_names(graph: KernelGraph, source: str) -> dict[str, str]:
    lines = source.splitlines()
    found = {}
    for name, value in graph.values.items():
        if not value.loc:
            continue
        try:
            _, line, column = value.loc.rsplit(":", 2)
            text = lines[int(line) - 1]
            col = int(column) - 1
        except (ValueError, IndexError):
            continue
        at = _ARG.match(text, col)
        before = _DEF.search(text[:col])
        if name in graph.args and at:
            found[name] = at.group(0)
        elif before and ":" not in before.group(1):
            found[name] = before.group(1)
    return found


@dataclass(frozen=True)
class Named:
    """A kernel-graph value with what to call it."""

    name: str  # the kernel graph's name, "%4"
    role: str  # "argument #1", "result #0", "intermediate"
    source: str = ""  # the source's name: a `slicer.name` ("fc1.weight"), an SSA name ("%w1"), or ""

    def __str__(self) -> str:
        source = f" {self.source}" if self.source else ""
        if self.role == "intermediate":
            return f"value {self.name}" + (f" ({self.source})" if self.source else "")
        return f"{self.role}{source} ({self.name})"

    @property
    def file_stem(self) -> str:
        """A file name for its picture: `arg1-w1`, `result0`, `v4-y`."""
        head = self.role.replace("argument #", "arg").replace("result #", "result")
        head = f"v{self.name[1:]}" if self.role == "intermediate" else head
        tail = re.sub(r"[^A-Za-z0-9_.-]", "_", self.source.lstrip("%")) if self.source else ""
        return f"{head}-{tail}" if tail else head


def describe(graph: KernelGraph, name: str, names: dict[str, str] | None = None) -> Named:
    names = names or {}
    if name in graph.args:
        role = f"argument #{graph.args.index(name)}"
    elif name in graph.results:
        role = f"result #{graph.results.index(name)}"
    else:
        role = "intermediate"
    return Named(name, role, names.get(name, ""))


def resolve(graph: KernelGraph, what, names: dict[str, str] | None = None, source: str = "") -> str:
    """The kernel-graph name of `what` (see the module docstring); `VizError` names the choices otherwise
    (and says so when `what` is defined in `source` but lives only inside a kernel)."""
    names = names or {}
    if isinstance(what, bool) or not isinstance(what, (int, str)):
        raise VizError(f"which value? give an argument index, 'arg1', 'result0', a value name such as '%4' or a "
                       f"source name such as 'w1', not {what!r}")
    if isinstance(what, int):
        return _indexed(graph, "arg", what)
    indexed = _INDEXED.match(what)
    if indexed:
        return _indexed(graph, indexed.group(1), int(indexed.group(2)))
    if what in graph.values:
        return what
    wanted = what if what.startswith("%") else f"%{what}"
    matches = [name for name, given in names.items() if given in (what, wanted)]
    matches += [name for name, ssa in (_ssa_names(graph, source) if source else {}).items() if ssa == wanted]
    if matches:
        return matches[0]
    choices = ", ".join(str(describe(graph, n, names)) for n in graph.values)
    inside = (f" ({wanted} is defined in the source but computed inside a kernel: no device holds it as a block "
              "between steps)") if re.search(re.escape(wanted) + r"(:\d+)?\s*=", source) else ""
    raise VizError(f"no value '{what}' in the kernel graph of @{graph.entry}{inside}; its values are: {choices}")


def _indexed(graph: KernelGraph, kind: str, index: int) -> str:
    items, what = (graph.results, "result") if kind == "result" else (graph.args, "argument")
    if not 0 <= index < len(items):
        valid = f"(0..{len(items) - 1})" if items else "(it has none)"
        raise VizError(f"@{graph.entry} has {len(items)} {what}{'' if len(items) == 1 else 's'}: {kind} index "
                       f"{index} is out of range {valid}")
    return items[index]


def global_type(graph: KernelGraph, name: str) -> tuple[DistType | None, str]:
    """The distributed type to draw for value `name`, and a note on where it comes from ("" when it is the
    value's own type). None when the value is a loop-body member no collective reads (see `varying`)."""
    value = graph.values[name]
    if not value.varying:
        return value.dist, ""
    for node in graph.nodes:
        if isinstance(node, CollectiveNode) and node.input == name:
            before = type_before(node.step, node.step.type_after, graph.mesh)  # the class inverts its rule
            if before is not None and before.local_shape(graph.mesh) == value.local_shape:
                return before, (f"computed in a loop body over {','.join(value.varying)}; this is the loop's result "
                                f"as the {node.op} that reads it sees it")
            break
    return None, (f"computed in a loop body over {','.join(value.varying)} (no collective reads it, so only its "
                  "members are known)")
