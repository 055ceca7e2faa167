"""What a Slicer pass is: a frozen dataclass whose fields are its options.

`slicer-propagate{strict-conflicts=1}` fills the field `strict_conflicts`
(kebab-case option names map to snake_case fields), as in xDSL. A pass reports
user errors by raising `PassFailure` (slicer.core.errors) with located
diagnostics; the pipeline adapter (`slicer.core.pipeline`) turns them into MLIR
diagnostics and fails the pass, so slicer-opt prints `file:line:col: error: ...`
and exits 1. The passes themselves are thin files in `slicer.passes`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from mlir import ir

from .errors import PipelineError


class OptionError(PipelineError):
    """A pass option that does not exist or does not parse."""


@dataclass(frozen=True)
class ModulePass:
    """Base of every Slicer pass: runs on a `builtin.module`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""

    def apply(self, module: ir.Operation) -> None:  # pragma: no cover - interface
        raise TypeError(f"{type(self).__name__} must define apply()")

    @classmethod
    def from_options(cls, options: dict[str, str]) -> "ModulePass":
        """Build the pass from textual options (`{"strict-conflicts": "1"}`)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, text in options.items():
            field = fields.get(key.replace("-", "_"))
            if field is None:
                known = ", ".join(f.replace("_", "-") for f in fields) or "none"
                raise OptionError(f"pass '{cls.name}' has no option '{key}' (options: {known})")
            values[field.name] = _convert(cls.name, key, text, field.type)
        return cls(**values)

    @classmethod
    def options_help(cls) -> list[str]:
        return [f"{f.name.replace('_', '-')}={f.default!r}" for f in dataclasses.fields(cls)]

    def pipeline_text(self) -> str:
        """This pass with its non-default options, as it would be written in a pipeline."""
        opts = [
            f"{f.name.replace('_', '-')}={_render(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != f.default
        ]
        return self.name + ("{" + " ".join(opts) + "}" if opts else "")


def _render(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def _convert(pass_name: str, key: str, text: str, type_) -> object:
    type_name = type_ if isinstance(type_, str) else getattr(type_, "__name__", str(type_))
    try:
        if type_name == "bool":
            lowered = text.lower()
            if lowered in ("1", "true", "on", ""):
                return True
            if lowered in ("0", "false", "off"):
                return False
            raise ValueError(text)
        if type_name == "int":
            return int(text, 0)
        if type_name == "float":
            return float(text)
        if type_name.startswith("tuple"):
            return tuple(item for item in text.split(",") if item)
        return text
    except ValueError:
        raise OptionError(f"pass '{pass_name}' option '{key}' expects a {type_name}, got '{text}'") from None
