"""Name patterns: one tactic for every argument or result whose name matches (docs/tactics.md, "Patterns").

A target name containing `*`, `?` or `[` is a *pattern*, matched against the whole `slicer.name` of every
argument (or result) with shell-style glob semantics (Python's `fnmatch.fnmatchcase`): `*` matches any run of
characters **dots included** (`blocks.*.weight` matches `blocks.0.attn.q.weight`), `?` one character, `[seq]` /
`[!seq]` one character of (not of) `seq`; case matters. A name equal to the pattern also matches (a name may
contain `[`). The rewriter (`rewrite.py`) and the strategy helpers (`slicer.strategies`) expand patterns here, so
both agree on what a pattern names.
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import re
from collections.abc import Sequence

_WILDCARDS = "*?["
_WILDCARD_RE = re.compile(r"\*|\?|\[[^\]]*\]?")


def is_pattern(name: str) -> bool:
    """Whether the target `name` is a pattern (contains `*`, `?` or `[`) rather than one name."""
    return any(c in name for c in _WILDCARDS)


def matches(pattern: str, name: str | None) -> bool:
    """Whether `name` (None: a value without a name) is named by `pattern` (a pattern or a plain name)."""
    if name is None:
        return False
    return name == pattern or (is_pattern(pattern) and fnmatch.fnmatchcase(name, pattern))


def matching(pattern: str, names: Sequence[str | None]) -> list[int]:
    """The positions of the names `pattern` matches, in order (as `matches` says of each name; the pattern is
    read once, not once per name: the search formats tactics over hundreds of names many times)."""
    if not is_pattern(pattern):
        return [i for i, name in enumerate(names) if name == pattern]
    match = _glob(pattern)
    return [i for i, name in enumerate(names) if name is not None and (name == pattern or match(name))]


@functools.lru_cache(maxsize=1024)
def _glob(pattern: str):
    """The compiled glob of `pattern` (`fnmatch.fnmatchcase`'s semantics): its `match`."""
    return re.compile(fnmatch.translate(pattern)).match


def closest(pattern: str, names: Sequence[str | None], n: int = 3) -> list[str]:
    """Up to `n` names closest to `pattern`, for messages: by similarity to the pattern, and to its literal parts
    (`blocks.*.atn.q` finds names containing `blocks.` or `.atn.q` when nothing is close as a whole)."""
    known = list(dict.fromkeys(name for name in names if name is not None))
    close = difflib.get_close_matches(pattern, known, n=n, cutoff=0.4 if is_pattern(pattern) else 0.6)
    if len(close) < n and is_pattern(pattern):
        literal = [part for part in _WILDCARD_RE.split(pattern) if part]
        for part in sorted(literal, key=len, reverse=True):
            for name in known:
                if part in name and name not in close and len(close) < n:
                    close.append(name)
    return close


def closest_hint(pattern: str, names: Sequence[str | None]) -> str:
    """' (closest: 'a', 'b')' naming the names closest to `pattern` (`closest`), or '' when none is: the part of
    a "matches nothing" message that says what the user may have meant."""
    close = closest(pattern, names)
    return f" (closest: {', '.join(repr(c) for c in close)})" if close else ""


__all__ = ["closest", "closest_hint", "is_pattern", "matches", "matching"]
