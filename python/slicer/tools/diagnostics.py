"""Diagnostics as slicer-opt prints and checks them (`file:line:col: error: msg`).

`--verify-diagnostics` follows mlir-opt: `// expected-error {{text}}` on the
line of the diagnostic, `@+N`/`@-N` relative, `@above`/`@below`, `@N` absolute;
likewise expected-warning/-note/-remark. Each expected diagnostic must be
produced (message contains the text) and no other may be.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mlir import ir

SEVERITY = {
    ir.DiagnosticSeverity.ERROR: "error",
    ir.DiagnosticSeverity.WARNING: "warning",
    ir.DiagnosticSeverity.NOTE: "note",
    ir.DiagnosticSeverity.REMARK: "remark",
}


@dataclass(frozen=True)
class Diag:
    severity: str
    file: str | None
    line: int | None
    col: int | None
    message: str
    notes: tuple[Diag, ...] = ()

    def render(self, default_file: str = "<unknown>") -> str:
        where = f"{self.file or default_file}:{self.line}:{self.col}" if self.line else (self.file or default_file)
        text = f"{where}: {self.severity}: {self.message}"
        return "\n".join([text] + [n.render(default_file) for n in self.notes])


def file_line_col(loc: ir.Location) -> tuple[str | None, int | None, int | None]:
    """The first file:line:col inside `loc` (looking through name/fused/callsite locations)."""
    if loc.is_a_file():
        return loc.filename, loc.start_line, loc.start_col
    if loc.is_a_name():
        return file_line_col(loc.child_loc)
    if loc.is_a_callsite():
        return file_line_col(loc.callee)
    if loc.is_a_fused():
        for inner in loc.locations:
            found = file_line_col(inner)
            if found[1] is not None:
                return found
    return None, None, None


def from_mlir(diag) -> Diag:
    """Convert an MLIR diagnostic (handler argument or MLIRError entry)."""
    file, line, col = file_line_col(diag.location)
    notes = tuple(from_mlir(n) for n in diag.notes)
    return Diag(SEVERITY.get(diag.severity, "error"), file, line, col, str(diag.message).rstrip(), notes)


_EXPECTED = re.compile(r"expected-(error|warning|note|remark)\s*(@(?:[+-]\d+|above|below|\d+))?\s*\{\{(.*?)\}\}")


@dataclass
class Expected:
    severity: str
    line: int
    text: str
    found: bool = False


def expectations(text: str, first_line: int = 1) -> list[Expected]:
    """Parse expected-* annotations; `first_line` is the file line of `text`'s first line."""
    found = []
    lines = text.splitlines()
    for offset, content in enumerate(lines):
        line = first_line + offset
        for match in _EXPECTED.finditer(content):
            severity, where, message = match.groups()
            target = line
            if where == "@above":
                target = line - 1
            elif where == "@below":
                target = line + 1
            elif where and where[1] in "+-":
                target = line + int(where[1:])
            elif where:
                target = int(where[1:])
            found.append(Expected(severity, target, message))
    return found


def check_expectations(expected: list[Expected], produced: list[Diag]) -> list[str]:
    """Mismatches between expected annotations and produced diagnostics (empty = success)."""
    problems = []
    flat = [d for diag in produced for d in (diag, *diag.notes)]
    for diag in flat:
        match = next(
            (
                e
                for e in expected
                if not e.found and e.severity == diag.severity and e.line == diag.line and e.text in diag.message
            ),
            None,
        )
        if match is not None:
            match.found = True
        elif diag.severity != "note":
            problems.append(f"unexpected {diag.severity} at line {diag.line}: {diag.message}")
    for e in expected:
        if not e.found:
            problems.append(f"expected {e.severity} at line {e.line} was not produced: {{{{{e.text}}}}}")
    return problems
