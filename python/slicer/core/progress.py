"""A progress line for long work (compiling many kernels), on terminals only.

    with Progress("compiling 24 kernels", total=4) as progress:
        progress.step("kernel pipeline")      # "compiling 24 kernels [1/4] kernel pipeline (0.0 s)"
        ...

The line is redrawn in place (carriage return, erase to the end of the line) on standard error and erased
when the work ends, so it never reaches CI logs, pipes or files: it is drawn only when the stream is a
terminal, and never when `SLICER_PROGRESS=0` or `CI` is set. `SLICER_PROGRESS=1` draws it on any stream.
"""

from __future__ import annotations

import shutil
import sys
import time

from . import environment


def wanted(stream) -> bool:
    """Whether to draw on `stream`: a terminal, unless SLICER_PROGRESS=0 or CI is set (SLICER_PROGRESS=1:
    always)."""
    setting = environment.value(environment.PROGRESS)
    if setting is not None:
        return setting == "1"
    if environment.value(environment.CI):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """`what [i/total] item (elapsed)` on one line of `stream` (default: standard error), see the module."""

    def __init__(self, what: str, total: int, *, stream=None):
        self.what, self.total, self.done = what, total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = wanted(self.stream)
        self.start = time.perf_counter()
        self.drawn = False

    def step(self, item: str) -> None:
        """Start the next step (`item` says what it does)."""
        self.done += 1
        if not self.enabled:
            return
        line = f"{self.what} [{self.done}/{self.total}] {item} ({time.perf_counter() - self.start:.1f} s)"
        width = shutil.get_terminal_size((100, 20)).columns - 1
        self.stream.write("\r\x1b[K" + line[:width])
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """Erase the line."""
        if self.drawn:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.drawn = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
