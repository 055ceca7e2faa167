"""No measured timings in the package's docstrings and comments: figures measured on one machine on one day go
stale where nobody re-measures them. They belong in benchmarks/README.md (or docs/), beside the command that
measures them again; the code keeps the reason ("the packed GEMM beats the naive loop on large operands").

A timing is a number with a unit of time or of throughput (`12 ms`, `3.5 s`, `40 GFLOP/s`, `9 GB/s`) or a
measured ratio (`4.5x faster`, `1.46x slower`, `37% over`). Units and ratios in code (a format string, a
constant) are not docstrings or comments and are not checked.
"""

import ast
import io
import re
import tokenize

from package_tree import docstrings, package_files, parsed, relative

TIMING = re.compile(
    r"(?<![\w.])\d+(?:\.\d+)?(?:\s?(?:ms|us|µs|ns|s|sec|seconds|milliseconds|minutes|min)\b(?![-/.]\w)"
    r"|\s?(?:[GMT]FLOP/s|[GMK]i?B/s|[GMT]FLOPS)"
    r"|\s?x\s(?:faster|slower|quicker|the\s(?:time|speed))"
    r"|x\s(?:faster|slower))",
    re.IGNORECASE)
"""A number with a unit of time or throughput, or a speed ratio."""

NOT_MEASURED = {
    ("core/progress.py", "kernel pipeline (0.0 s)"): "an example of the progress line's text",
    ("runtime/jobs/rank_job.py", "default 5 s"): "a default the user may change, not a measurement",
    ("runtime/jobs/rank_job.py", "comes for 0.25 s"):
        "a design constant (how long to wait for a failing rank's message)",
    ("runtime/jobs/rank_job.py", "at most 2 s."): "a design constant (the wait's bound)",
    ("runtime/collectives/shm_collectives.py", "every 0.2 s"): "a design constant (the futex wait's timeout)",
    ("viz/timeline.py", "3 ms of 4.5 ms is column 6"): "arithmetic on an example, not a measurement",
}
"""Lines that quote a time that is not a measurement: (module, the text on the line) -> why."""


def _comments(source: str):
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def _docstring_lines(tree: ast.Module):
    ids = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) in ids and isinstance(node.value, str):
            for offset, line in enumerate(node.value.splitlines()):
                yield node.lineno + offset, line


def timings(source: str, tree: ast.Module):
    """(line, text) of every docstring or comment line of a module that quotes a timing."""
    for number, text in [*_docstring_lines(tree), *_comments(source)]:
        if TIMING.search(text):
            yield number, text.strip()


def test_no_docstring_or_comment_quotes_a_timing():
    offenders = [f"{relative(path)}:{number}: {text}" for path in package_files()
                 for number, text in timings(path.read_text(), parsed(path))
                 if not any(module == relative(path) and quote in text for module, quote in NOT_MEASURED)]
    assert not offenders, ("measured timings in docstrings or comments (move the figures to benchmarks/README.md, "
                           "keep the reason):\n" + "\n".join(offenders))


def test_the_check_tells_timings_from_other_numbers():
    source = ('"""Packs panels: 4.5x faster than the naive loop."""\n'
              "x = 1  # a collective takes 12 ms here\n"
              "y = 2  # 3 dims, 2 axes, a 1-D mesh, x=2,y=4, 64 rewrites per op, 2 s.t. bounds\n"
              'def f():\n    """Reaches 40 GFLOP/s on one core."""\n')
    assert [n for n, _ in timings(source, ast.parse(source))] == [1, 5, 2]
