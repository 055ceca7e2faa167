"""Every lint or type suppression in the checkout names what it silences (issue 47): a `noqa` its rule codes, a
`type: ignore` its mypy error codes; no file-wide blanket (`ruff: noqa`, `mypy: ignore-errors`). ruff's RUF100
(run here and by `make lint`) reports a `noqa` that silences nothing."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SKIP_DIRS = {".git", ".venv", "build", "node_modules", "__pycache__"}

NOQA = re.compile(r"#\s*noqa\b(?P<colon>:?)(?P<codes>\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?", re.IGNORECASE)
TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*\])?")
BLANKET = re.compile(r"#\s*(?:ruff|flake8)\s*:\s*noqa(?!\s*:\s*[A-Z]+[0-9]+)|#\s*mypy\s*:\s*ignore-errors",
                     re.IGNORECASE)


def python_files() -> list[Path]:
    """The checkout's Python files, each once."""
    found = []
    for root, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        found += [Path(root) / name for name in files if name.endswith(".py")]
    return sorted(found)


def problems(text: str) -> list[str]:
    """The suppressions of one file's comments that do not name their codes (line: comment)."""
    out = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        comment, line = token.string, token.start[0]
        for match in NOQA.finditer(comment):
            if not match.group("colon") or not match.group("codes"):
                out.append(f"{line}: `noqa` without a rule code: {comment}")
        for match in TYPE_IGNORE.finditer(comment):
            if not match.group("codes"):
                out.append(f"{line}: `type: ignore` without an error code: {comment}")
        if BLANKET.search(comment):
            out.append(f"{line}: a file-wide suppression: {comment}")
    return out


def test_the_check_tells_a_coded_suppression_from_a_bare_one():
    assert problems("x = 1  # noqa: E731 - why\ny = f()  # type: ignore[attr-defined]\n") == []
    assert problems("import a, b  # noqa: F401, E401\n") == []
    assert len(problems("x = 1  # noqa\n")) == 1
    assert len(problems("x = 1  # NOQA: why not\n")) == 1
    assert len(problems("y = f()  # type: ignore\n")) == 1
    assert len(problems("# ruff: noqa\n")) == 1 and len(problems("# mypy: ignore-errors\n")) == 1
    assert problems('s = "# noqa"\n') == []  # in a string, not a comment


def test_every_suppression_names_its_codes():
    files = python_files()
    assert any(path.parts[-3:] == ("python", "slicer", "api.py") for path in files)
    assert any(path.relative_to(ROOT).parts[0] == "runtime" for path in files)  # the mapped folders too
    assert not any("python/slicer/runtime" in str(path.relative_to(ROOT)) for path in files)
    bad = [f"{path.relative_to(ROOT)}:{problem}" for path in files for problem in problems(path.read_text())]
    assert not bad, "suppressions must name their codes:\n" + "\n".join(bad)


def test_no_suppression_is_unused():
    """ruff's RUF100 (a `noqa` whose codes silence nothing) and PGH003/PGH004 (blanket ones) among the findings
    of `ruff check` with the repo's configuration (pyproject.toml; RUF100 only judges the rules it selects)."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          capture_output=True, text=True, cwd=ROOT)
    assert "Traceback" not in done.stderr and ("All checks passed" in done.stdout or "Found" in done.stdout), \
        done.stdout + done.stderr
    unused = [line for line in done.stdout.splitlines() if re.search(r": (RUF100|PGH003|PGH004) ", line)]
    assert not unused, "\n".join(unused)
