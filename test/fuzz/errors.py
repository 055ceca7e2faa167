"""Which exceptions are clean, user-facing errors, and failure signatures (the ONE place to change).

A *clean error* is an exception of slicer's documented user-facing classes
(all derive from `slicer.SlicerError`, docs/errors.md) whose message does not
say "internal error" (nor carries a Python traceback). Anything else that
escapes slicer is an *internal error*.
"""

from __future__ import annotations

import importlib
import re

# Documented user-facing error classes, by dotted path (missing ones are skipped).
CLEAN_ERROR_CLASSES = ("slicer.SlicerError",)

# A message with one of these (lower-cased) is an internal error whatever its class: slicer says so, or a
# Python traceback reached the user, or the MLIR verifier rejected IR a pass produced ("see current
# operation" notes come from the verifier / pass manager, never from slicer's own located diagnostics, and
# the fuzzer's input programs verify before they are given to slicer).
INTERNAL_MARKERS = ("internal error", "traceback (most recent call last)", "see current operation")


def clean_error_classes() -> tuple[type, ...]:
    classes = []
    for path in CLEAN_ERROR_CLASSES:
        module, _, name = path.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name, None)
        except ImportError:
            cls = None
        if isinstance(cls, type):
            classes.append(cls)
    return tuple(classes)


def is_clean(exc: BaseException) -> bool:
    if not isinstance(exc, clean_error_classes()):
        return False
    text = str(exc).lower()
    return not any(marker in text for marker in INTERNAL_MARKERS)


_EXC_LINE = re.compile(r"^([\w.<>]*?)([A-Z]\w*(?:Error|Exception|Iteration|Failure|Mismatch|Exit|Interrupt))"
                       r"(?::\s*(.*))?$")


_FRAME = re.compile(r'^File "([^"]+)", line \d+, in (\S+)')


def _exception_line(lines: list[str]) -> str | None:
    """`Name: text` of the last exception raised in an embedded traceback (the text completed by the next
    `error:` diagnostic when it only says the pass pipeline failed)."""
    starts = [i for i, line in enumerate(lines) if "Traceback (most recent call last)" in line]
    if not starts:
        return None
    after = lines[starts[-1] + 1:]
    where = ""
    for j, line in enumerate(after):
        frame = _FRAME.match(line)
        if frame:
            where = f" (in {frame.group(1).rsplit('/', 1)[-1]}:{frame.group(2)})"
            continue
        m = _EXC_LINE.match(line)
        if not m:
            continue
        rest = (m.group(3) or "").strip()
        if not rest or rest.startswith("Failure while executing"):
            rest = next((x[x.index("error:") + 6:].strip() for x in after[j + 1:] if "error:" in x), rest)
        return f"{m.group(2)}{where}: {rest}" if rest else f"{m.group(2)}{where}"
    return None


def key_line(message: str) -> str:
    """The line of an error message that identifies it: the last exception of an embedded traceback, else
    the first `error:` diagnostic, else the first non-empty line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    found = _exception_line(lines)
    if found:
        return found
    for line in lines:
        if "error:" in line:
            return line[line.index("error:") + len("error:"):].strip()
    for line in lines:
        if not line.startswith("Failure while executing pass pipeline"):
            return line
    return lines[0] if lines else ""


def normalize(line: str) -> str:
    """Drop what varies between instances of one bug: locations, sizes, types, value names."""
    line = re.sub(r"\"[^\"]*\":\d+:\d+:?", "", line)  # "file":line:col
    line = re.sub(r"\"[^\"]*\"\(\):?\s*", "", line)  # a named location around it
    line = re.sub(r"loc\([^)]*\)", "loc", line)
    line = re.sub(r"tensor<[^>]*>", "tensor<...>", line)
    line = re.sub(r"%[\w.#]+", "%V", line)
    line = re.sub(r"@\w+", "@F", line)
    line = re.sub(r"\[[\[\]xyzw, ]*\]", "[AXES]", line)  # [[x,y],[]]
    line = re.sub(r"\(('[xyzw]',? ?)+\)", "AXES", line)  # ('x', 'y')
    line = re.sub(r"'[xyzw]'", "AXES", line)
    line = re.sub(r"\b[xyzw]\(\d+\)(\*[xyzw]\(\d+\))*", "AXES", line)  # y(4)*z(1)
    line = re.sub(r"\|[xyzw]\|=\d+( \* \|[xyzw]\|=\d+)*", "AXES", line)  # |x|=2 * |y|=4
    line = re.sub(r"\b[xyzw](, ?[xyzw])*\b(?=[);]|$)", "AXES", line)  # has axes x, z, y)
    line = re.sub(r"\b[xyzw](,[xyzw])+\b", "AXES", line)
    line = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "N", line)
    line = re.sub(r"\s+", " ", line).strip()
    return line[:200]


def signature(kind: str, stage: str, type_name: str, message: str) -> str:
    if kind in ("wrong", "hang"):
        return f"{kind}|{stage}"
    return f"{kind}|{stage}|{type_name}|{normalize(key_line(message))}"
