"""What a Slicer pass is (a frozen dataclass whose fields are its options) and the one registry of passes.

`slicer-propagate{strict-conflicts=1}` fills the field `strict_conflicts` (kebab-case option names map to
snake_case fields), as in xDSL. Options are typed by their fields' annotations (`bool`, `int`, `float`, `str`,
and tuples of those: `matmul=8,32,16` for `tuple[int, int, int]`); an option the pass does not have, or a value
that does not parse, is an `OptionError`, and so is a value the pass refuses in its `__post_init__`. A pass
reports user errors by raising `PassFailure` (slicer.core.errors) with located diagnostics, or another
documented `SlicerError`; the pipeline adapter (`slicer.core.pipeline`) turns them into MLIR diagnostics and
fails the pass, so slicer-opt prints `file:line:col: error: ...` and exits 1.

`PASSES` is the one registry, by name: a pass class registers itself with `@register_pass` when its module is
imported. It lives here, at the bottom of the layers, so every layer runs registered passes by name. A
`PassTable` names the passes of a package (one module per pass, named like it) and imports a pass's module
only when the pass is first looked up: `slicer-opt -p slicer-kernel-rows` loads the row kernels, not the
partitioner. `slicer.passes.PASSES` is the table of every pass (slicer-opt, `slicer.passes.run_pipeline`);
`slicer.lowering.passes.LOWERING_PASSES` that of the kernel pipeline's steps, which live in the lowering
because the lowering and the runtime (below `slicer.passes`) run them.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
import typing
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from mlir import ir

from .errors import OptionError, PipelineError

__all__ = ["ModulePass", "OptionError", "PASSES", "PassTable", "register_pass", "registered_pass"]


@dataclass(frozen=True)
class ModulePass(abc.ABC):
    """Base of every Slicer pass: runs on a `builtin.module`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    dependent_dialects: ClassVar[tuple[str, ...]] = ()
    """Dialects the pass creates ops of, not otherwise loaded (`core.names.BUILT_DIALECTS` are): loaded when the
    pass is added to a pass manager, as MLIR's `getDependentDialects` does, since a dialect cannot load while
    passes run (multi-threaded)."""

    @abc.abstractmethod
    def apply(self, module: ir.Operation) -> None:
        """Run on `module` in place (its context is current)."""

    @classmethod
    def from_options(cls, options: dict[str, str]) -> ModulePass:
        """Build the pass from textual options (`{"strict-conflicts": "1"}`); OptionError if one is wrong."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        values = {}
        for key, text in options.items():
            field = fields.get(key.replace("-", "_"))
            if field is None:
                known = ", ".join(f.replace("_", "-") for f in fields) or "none"
                raise OptionError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
            values[field.name] = _convert(cls.name, key, text, hints[field.name])
        return cls(**values)

    @classmethod
    def options_help(cls) -> list[str]:
        """One `option=default` line per option (a tuple as the pipeline writes it: `matmul=8,32,16`)."""
        return [f"{f.name.replace('_', '-')}={_render(f.default) if isinstance(f.default, tuple) else repr(f.default)}"
                for f in dataclasses.fields(cls)]

    def pipeline_text(self) -> str:
        """This pass with its non-default options, as it would be written in a pipeline."""
        opts = [
            f"{f.name.replace('_', '-')}={_render(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        ]
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")


PASSES: dict[str, type[ModulePass]] = {}
"""Every registered pass class, by its pipeline name."""

P = TypeVar("P", bound=type[ModulePass])


def register_pass(cls: P) -> P:
    """Class decorator: add `cls` to `PASSES` under its `name` (a second class under the same name is an error)."""
    if not cls.name:
        raise PipelineError(f"pass class {cls.__qualname__} has no name: give it `name = \"slicer-...\"`")
    known = PASSES.get(cls.name)
    if known is not None and known.__qualname__ != cls.__qualname__:
        raise PipelineError(f"two passes named '{cls.name}': {known.__module__}.{known.__qualname__} and "
                            f"{cls.__module__}.{cls.__qualname__}")
    PASSES[cls.name] = cls
    return cls


def registered_pass(name: str) -> type[ModulePass] | None:
    """The registered pass called `name`, or None."""
    return PASSES.get(name)


class PassTable(Mapping[str, type[ModulePass]]):
    """Passes by name, each imported (which registers it) when first looked up: the pass `slicer-kernel-rows`
    of `PassTable("slicer.lowering.passes", [...])` is the class its module `slicer.lowering.passes.kernel_rows`
    registers. `in`, `len` and iteration read the names only; `tables | other` holds both tables' passes."""

    def __init__(self, package: str = "", names: Iterable[str] = (), modules: Mapping[str, str] | None = None):
        self.modules = dict(modules or {})
        self.modules.update({name: f"{package}.{module_of(name)}" for name in names})

    def __getitem__(self, name: str) -> type[ModulePass]:
        module = self.modules[name]  # KeyError: not a pass of this table
        if name not in PASSES:
            importlib.import_module(module)
        cls = PASSES.get(name)
        if cls is None:
            raise PipelineError(f"module {module} registers no pass '{name}' (give its class `name = \"{name}\"` "
                                f"and `@register_pass`)")
        return cls

    def __contains__(self, name: object) -> bool:
        return name in self.modules

    def __iter__(self) -> Iterator[str]:
        return iter(self.modules)

    def __len__(self) -> int:
        return len(self.modules)

    def __or__(self, other: PassTable) -> PassTable:
        return PassTable(modules={**self.modules, **other.modules})


def module_of(name: str) -> str:
    """The module of the pass `name` in its package: `slicer-kernel-rows` -> `kernel_rows`."""
    return name.removeprefix("slicer-").replace("-", "_")


def _render(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


_SCALARS = {bool: "a bool (true/false, 1/0, on/off)", int: "an integer", float: "a number", str: "a string"}


def _convert(pass_name: str, key: str, text: str, type_) -> object:
    """`text` as a value of the field type `type_`: a scalar, or a tuple of scalars (comma-separated)."""
    if typing.get_origin(type_) is tuple:
        args = typing.get_args(type_)
        items = [item.strip() for item in text.split(",") if item.strip()]
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_scalar(pass_name, key, item, args[0]) for item in items)
        if args and len(items) != len(args):
            raise OptionError(f"pass '{pass_name}' option '{key}' takes {len(args)} comma-separated values, "
                              f"got '{text}'")
        return tuple(_scalar(pass_name, key, item, arg) for item, arg in zip(items, args or [str] * len(items)))
    return _scalar(pass_name, key, text, type_)


_BOOLS = {"1": True, "true": True, "on": True, "": True, "0": False, "false": False, "off": False}


def _scalar(pass_name: str, key: str, text: str, type_) -> object:
    value: object = None
    if type_ is bool:
        value = _BOOLS.get(text.lower())
    elif type_ in (int, float):
        try:
            value = int(text, 0) if type_ is int else float(text)
        except ValueError:
            value = None
    else:
        value = text
    if value is None:
        what = _SCALARS.get(type_, getattr(type_, "__name__", str(type_)))
        raise OptionError(f"pass '{pass_name}' option '{key}' expects {what}, got '{text}'")
    return value
