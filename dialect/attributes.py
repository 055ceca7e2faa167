"""Typed views of the `slicer` dialect's type and attributes.

IRDL-defined (dynamic) types and attributes expose no parameter accessors in
the MLIR 22 Python bindings, so each view reads its parameters back from the
printed form, parsing the parameter text with MLIR's own attribute parser (no
hand-written parsing of MLIR syntax beyond splitting off the outer `<...>`).
Passes use these views and never look at printed text themselves.

Axis order convention everywhere in Slicer: axes are listed **major to minor**
(JAX / upstream `shard`): for a dim tiled by `("x", "y")` the block index is
`idx(x) * |y| + idx(y)`.
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

from mlir import ir

from slicer.core.capsules import ATTRIBUTE_CAPSULE, TYPE_CAPSULE, capsule_pointer
from slicer.core.errors import DialectError

AxisNames = tuple[str, ...]


def _split_params(text: str, prefix: str) -> list[str] | None:
    """`prefix<a, [b, c], 2 : i64>` -> ["a", "[b, c]", "2 : i64"]; None if not that form."""
    if not (text.startswith(prefix + "<") and text.endswith(">")):
        return None
    body = text[len(prefix) + 1 : -1]
    params, depth, start, in_string = [], 0, 0, False
    for i, ch in enumerate(body):
        if in_string:
            if ch == "\\":
                continue
            if ch == '"' and body[i - 1] != "\\":
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[<({":
            depth += 1
        elif ch in "]>)}":
            depth -= 1
        elif ch == "," and depth == 0:
            params.append(body[start:i].strip())
            start = i + 1
    params.append(body[start:].strip())
    return params


def _axis_names(attr: ir.Attribute) -> AxisNames:
    """A string attribute or an array of string attributes -> tuple of names."""
    if isinstance(attr, ir.StringAttr):
        return (attr.value,)
    if isinstance(attr, ir.ArrayAttr) and all(isinstance(a, ir.StringAttr) for a in attr):
        return tuple(a.value for a in attr)
    raise DialectError(f"expected an axis name or a list of axis names, got {attr}")


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


# ----------------------------------------------------------------------------- range


@dataclass(frozen=True)
class RangeType:
    """`!slicer.range<axes, size>`: an index running over the devices of `axes`.

    `axes` has one name for a plain range and several (major to minor) for a
    product range; `size` is the number of indices (product of the axis sizes).
    """

    axes: AxisNames
    size: int

    def to_type(self, context: ir.Context | None = None) -> ir.Type:
        axes = _quote(self.axes[0]) if len(self.axes) == 1 else "[" + ", ".join(map(_quote, self.axes)) + "]"
        return ir.Type.parse(f"!slicer.range<{axes}, {self.size}>", context)

    @staticmethod
    def of(type_: ir.Type) -> RangeType | None:
        """The view of `type_`, or None if it is not a range type."""
        return _view(type_, capsule_pointer(type_._CAPIPtr, TYPE_CAPSULE), _RANGES, _parse_range)

    @staticmethod
    def is_range(type_: ir.Type) -> bool:
        return str(type_).startswith("!slicer.range<")

    def __str__(self) -> str:
        return f"range<{','.join(self.axes)}, {self.size}>"


# Views are pure functions of the printed type or attribute (immutable values) that propagation asks for
# again and again: each text is parsed once.
_RANGES: dict[str, RangeType | None] = {}
_ACTIONS: dict[str, Action | None] = {}
# Printing is most of that cost: the views are also kept per context by the address of the type or attribute
# (uniqued in its context, never freed while it lives). The context is held weakly: a view table goes with its
# context, and no type or attribute is held (holding one would keep its context, constants included, alive).
_BY_ADDRESS: weakref.WeakKeyDictionary[ir.Context, dict[tuple[dict, int], object]] = weakref.WeakKeyDictionary()
_UNKNOWN = object()


def _view(value, address: int, by_text: dict, parse):
    """The view of `value` (a type or an attribute at `address`) from its context's table, else from `by_text`
    (the kind's views by printed text, `parse(text, context)` filling it), remembered in both."""
    table = _BY_ADDRESS.get(value.context)
    if table is None:
        table = _BY_ADDRESS[value.context] = {}
    key = (id(by_text), address)
    found = table.get(key, _UNKNOWN)
    if found is _UNKNOWN:
        text = str(value)
        if text not in by_text:
            by_text[text] = parse(text, value.context)
        found = table[key] = by_text[text]
    return found


def _parse_range(text: str, context: ir.Context) -> RangeType | None:
    params = _split_params(text, "!slicer.range")
    if params is None or len(params) != 2:
        return None
    try:
        axes = _axis_names(ir.Attribute.parse(params[0], context))
        size = ir.IntegerAttr(ir.Attribute.parse(params[1], context)).value
    except (ValueError, DialectError):
        return None  # malformed parameters: not a range (slicer-verify reports it)
    return RangeType(axes, size)


# ----------------------------------------------------------------------------- loop action


@dataclass(frozen=True)
class TileAction:
    """Loop action `#slicer.tile<dim>`: concatenate the body's blocks along `dim`."""

    dim: int

    def to_attr(self, context: ir.Context | None = None) -> ir.Attribute:
        return ir.Attribute.parse(f"#slicer.tile<{self.dim}>", context)

    def __str__(self) -> str:
        return f"tile<{self.dim}>"


@dataclass(frozen=True)
class SumAction:
    """Loop action `#slicer.sum`: add the body's blocks up (elementwise)."""

    def to_attr(self, context: ir.Context | None = None) -> ir.Attribute:
        return ir.Attribute.parse("#slicer.sum", context)

    def __str__(self) -> str:
        return "sum"


Action = TileAction | SumAction


def action_of(attr: ir.Attribute) -> Action | None:
    """The loop action `attr` denotes, or None if it is not one."""
    return _view(attr, capsule_pointer(attr._CAPIPtr, ATTRIBUTE_CAPSULE), _ACTIONS, _parse_action)


def _parse_action(text: str, context: ir.Context) -> Action | None:
    if text == "#slicer.sum":
        return SumAction()
    params = _split_params(text, "#slicer.tile")
    if params is None or len(params) != 1:
        return None
    value = ir.Attribute.parse(params[0], context)
    if not isinstance(value, ir.IntegerAttr):
        return None
    return TileAction(ir.IntegerAttr(value).value)


# ----------------------------------------------------------------------------- sharding


@dataclass(frozen=True)
class Sharding:
    """`#slicer.sharding<@mesh, [["x"], []]>`: a requested distribution.

    One tuple of mesh axes per tensor dim, major to minor; `()` = not tiled.
    """

    mesh: str
    dims: tuple[AxisNames, ...]

    def to_attr(self, context: ir.Context | None = None) -> ir.Attribute:
        dims = ", ".join("[" + ", ".join(map(_quote, axes)) + "]" for axes in self.dims)
        return ir.Attribute.parse(f"#slicer.sharding<@{_symbol(self.mesh)}, [{dims}]>", context)

    @staticmethod
    def of(attr: ir.Attribute) -> Sharding | None:
        params = _split_params(str(attr), "#slicer.sharding")
        if params is None or len(params) != 2:
            return None
        mesh = ir.Attribute.parse(params[0], attr.context)
        dims = ir.Attribute.parse(params[1], attr.context)
        if not isinstance(mesh, ir.FlatSymbolRefAttr) or not isinstance(dims, ir.ArrayAttr):
            return None
        try:
            return Sharding(ir.FlatSymbolRefAttr(mesh).value, tuple(_axis_list(d) for d in dims))
        except DialectError:
            return None  # a dim that is not a list of axis names

    def used_axes(self) -> AxisNames:
        return tuple(a for axes in self.dims for a in axes)

    def __str__(self) -> str:
        return "[" + ",".join("[" + ",".join(axes) + "]" for axes in self.dims) + "]"


def _axis_list(attr: ir.Attribute) -> AxisNames:
    if isinstance(attr, ir.ArrayAttr):
        return _axis_names(attr) if len(attr) else ()
    raise DialectError(f"expected a list of axis names per dim, got {attr}")


_BARE_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")


def _symbol(name: str) -> str:
    return name if _BARE_SYMBOL.match(name) else _quote(name)
