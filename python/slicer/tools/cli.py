"""The convention every Slicer command-line tool follows (docs/architecture.md, layer 16).

Flags: the output is `-o/--output`, a number of MPI ranks `-n/--ranks`, timed repetitions `--repeat`.
Exit codes:

- `EXIT_OK` (0): success.
- `EXIT_FAILURE` (1): the tool read its command line and the work failed: the program does not parse, verify
  or compile, it does not fit its inputs, a pass, plan or run failed, or `--check` found a mismatch.
- `EXIT_USAGE` (2, argparse's own code): the command line cannot be used as given: an unknown or missing flag,
  a flag value of the wrong form (a mesh, a type, a tactic, a pipeline), or a file it names that cannot be
  read. Decided before the tool looks at the program.

Every error prints one `TOOL: error: MESSAGE` on stderr (a usage error after the usage line), never a
traceback.
"""

from __future__ import annotations

import argparse
import sys

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def failure(prog: str, message) -> int:
    """Print `prog: error: message` and return EXIT_FAILURE."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return EXIT_FAILURE


def usage_error(parser: argparse.ArgumentParser, message) -> int:
    """Print the usage line and `prog: error: message` as argparse does for a bad flag; return EXIT_USAGE."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def unreadable(path, exc: OSError) -> str:
    """The message for a file named on the command line that cannot be read."""
    return f"cannot read '{path}': {exc.strerror or exc}"


__all__ = ["EXIT_FAILURE", "EXIT_OK", "EXIT_USAGE", "failure", "unreadable", "usage_error"]
