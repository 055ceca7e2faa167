"""Shrinking a failing case by editing its choice sequence (see `source.py`).

The runner generates cases from `RandomSource`s, which record their draws; any edited sequence replays
through `ReplaySource` into another well-typed case. `shrink` keeps a candidate when it fails the same way
(`same(outcome)`) and is simpler: shorter, or as long and lexicographically smaller. Passes: delete runs
of draws (8, 4, 2, 1 long), set a draw to 0, halve it, decrement it; repeated until nothing improves or
the budget of executions is spent. (The pytest suite shrinks with hypothesis instead.)
"""

from __future__ import annotations

from typing import Callable

from .cases import Case, generate_case
from .source import ReplaySource


def replay(choices: list[int], seed: int, max_ops: int = 8) -> Case:
    src = ReplaySource(choices)
    return generate_case(src, seed=seed, max_ops=max_ops)


def shrink(case: Case, still_fails: Callable[[Case], bool], *, budget: int = 300, max_ops: int = 8,
           log: Callable[[str], None] | None = None) -> tuple[Case, int]:
    """The simplest case found that still fails, and the number of executions spent."""
    if case.choices is None:
        return case, 0
    best = list(replay(case.choices, case.seed, max_ops).choices or [])
    best_case = case
    seen: dict[tuple, bool] = {}
    spent = 0

    def better(c: list[int]) -> bool:
        return (len(c), c) < (len(best), best)

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, best_case, spent
        if spent >= budget:
            return False
        c = replay(candidate, case.seed, max_ops)
        normal = list(c.choices or [])
        if not better(normal):
            return False
        key = tuple(normal)
        if key in seen:
            return False
        spent += 1
        ok = still_fails(c)
        seen[key] = ok
        if ok:
            best, best_case = normal, c
            if log:
                log(f"    shrunk to {len(best)} choices: {c.program.describe()}, {len(c.tactics)} tactics")
        return ok

    improved = True
    while improved and spent < budget:
        improved = False
        for size in (8, 4, 2, 1):
            i = 0
            while i + size <= len(best) and spent < budget:
                if attempt(best[:i] + best[i + size:]):
                    improved = True
                else:
                    i += 1
        i = 0
        while i < len(best) and spent < budget:
            current = best[i]
            for value in sorted({0, current // 2, current - 1}):
                if 0 <= value < current and attempt(best[:i] + [value] + best[i + 1:]):
                    improved = True
                    break
            i += 1
    return best_case, spent
