"""Shrinking a failing case by editing its choice sequence (see `source.py`).

The runner generates cases from `RandomSource`s, which record their draws; any edited sequence replays
through `ReplaySource` into another well-typed case. `shrink` keeps a candidate when it fails the same way
(`same(outcome)`) and is simpler: shorter, or as long and lexicographically smaller. Passes: delete runs
of draws (8, 4, 2, 1 long), set a draw to 0, halve it, decrement it; repeated until nothing improves or
the budget of executions is spent. (The pytest suite shrinks with hypothesis instead.)
"""

from __future__ import annotations

from collections.abc import Callable

from .cases import Case, generate_case
from .programs import Features
from .source import ReplaySource


def replay(choices: list[int], seed: int, max_ops: int = 8, features: Features = Features()) -> Case:
    src = ReplaySource(choices)
    return generate_case(src, seed=seed, max_ops=max_ops, features=features)


def shrink(case: Case, still_fails: Callable[[Case], bool], *, budget: int = 300, max_ops: int = 8,
           features: Features = Features(), log: Callable[[str], None] | None = None) -> tuple[Case, int]:
    """The simplest case found that still fails, and the number of executions spent."""
    if case.choices is None:
        return case, 0
    best = list(replay(case.choices, case.seed, max_ops, features).choices or [])
    best_case = case
    seen: dict[tuple, bool] = {}
    spent = 0

    def better(c: list[int]) -> bool:
        return (len(c), c) < (len(best), best)

    def attempt(candidate: list[int]) -> bool:
        nonlocal best, best_case, spent
        if spent >= budget:
            return False
        c = replay(candidate, case.seed, max_ops, features)
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


# ============================================================================ structural shrinking


def _live(program) -> set[str]:
    live = set(program.results)
    for op in reversed(program.ops):
        if op.out in live:
            live.update(op.ins)
    return live


def _without_dead_ops(program):
    from .programs import Program

    live = _live(program)
    return Program(program.dtype, list(program.args), [op for op in program.ops if op.out in live],
                   list(program.results))


def _reindex(tactics, target: str, removed: int):
    out = []
    for t in tactics:
        if t.target == target and t.index == removed:
            continue
        if t.target == target and t.index > removed:
            t = type(t)(t.kind, t.target, t.index - 1, t.dim, t.axes)
        out.append(t)
    return out


def _candidates(case: Case):
    """Simpler variants of `case` (each a valid, well-typed case), most promising first."""
    from .programs import Op, Program
    from .schedules import TacticSpec

    p = case.program
    # dead code
    pruned = _without_dead_ops(p)
    if len(pruned.ops) < len(p.ops):
        yield Case(pruned, case.mesh, case.tactics, case.seed)
    # drop a tactic
    for i in range(len(case.tactics)):
        yield Case(p, case.mesh, case.tactics[:i] + case.tactics[i + 1:], case.seed)
    # drop a result
    if len(p.results) > 1:
        for j in range(len(p.results)):
            q = _without_dead_ops(Program(p.dtype, list(p.args), list(p.ops), p.results[:j] + p.results[j + 1:]))
            yield Case(q, case.mesh, _reindex(case.tactics, "result", j), case.seed)
    # drop an unused argument
    used = {i for op in p.ops for i in op.ins} | set(p.results)
    for k, (name, _) in enumerate(p.args):
        if name not in used:
            q = Program(p.dtype, p.args[:k] + p.args[k + 1:], list(p.ops), list(p.results))
            yield Case(q, case.mesh, _reindex(case.tactics, "arg", k), case.seed)
    # bypass an op by one of its operands of the same shape, or cut it out (its value becomes an argument)
    shapes = p.shapes()
    for n, op in enumerate(p.ops):
        for x in op.ins:
            if shapes[x] == tuple(op.shape):
                ops = [Op(o.kind, tuple(x if i == op.out else i for i in o.ins), o.out, o.shape, o.attrs)
                       for o in p.ops[:n] + p.ops[n + 1:]]
                results = [x if r == op.out else r for r in p.results]
                yield Case(_without_dead_ops(Program(p.dtype, list(p.args), ops, results)), case.mesh, case.tactics,
                           case.seed)
                break
    for n, op in enumerate(p.ops):
        if op.ins:
            q = Program(p.dtype, list(p.args) + [(op.out, tuple(op.shape))], p.ops[:n] + p.ops[n + 1:],
                        list(p.results))
            yield Case(_without_dead_ops(q), case.mesh, case.tactics, case.seed)
    # fewer axes on a tactic
    for i, t in enumerate(case.tactics):
        if t.kind == "tile" and len(t.axes) > 1:
            for a in t.axes:
                yield Case(p, case.mesh, case.tactics[:i] + [TacticSpec("tile", t.target, t.index, t.dim, (a,))]
                           + case.tactics[i + 1:], case.seed)
    # a smaller mesh: drop an axis no tactic uses, or shrink an axis
    used_axes = {a for t in case.tactics for a in t.axes}
    for a in case.mesh:
        if a not in used_axes and len(case.mesh) > 1:
            yield Case(p, {b: s for b, s in case.mesh.items() if b != a}, case.tactics, case.seed)
    for a, s in case.mesh.items():
        for smaller in (1, 2, 3):
            if smaller < s:
                yield Case(p, {**case.mesh, a: smaller}, case.tactics, case.seed)


def _size(case: Case) -> tuple:
    p = case.program
    return (len(p.ops), len(case.tactics), len(p.args), len(p.results), case.devices, len(case.mesh),
            sum(len(t.axes) for t in case.tactics), sum(sum(s) for _, s in p.args))


def shrink_structure(case: Case, still_fails: Callable[[Case], bool], *, budget: int = 200,
                     log: Callable[[str], None] | None = None) -> tuple[Case, int]:
    """Greedy structural shrinking on the program and schedule themselves (dead code, tactics, results,
    arguments, ops bypassed or cut into arguments, mesh axes), keeping what still fails."""
    spent = 0
    seen: set[str] = set()
    best = Case(case.program, case.mesh, case.tactics, case.seed)
    improved = True
    while improved and spent < budget:
        improved = False
        for cand in _candidates(best):
            if spent >= budget:
                break
            if _size(cand) >= _size(best):
                continue
            key = cand.key()
            if key in seen:
                continue
            seen.add(key)
            spent += 1
            if still_fails(cand):
                best = cand
                improved = True
                if log:
                    log(f"    structure: {best.program.describe()}, {len(best.tactics)} tactics, mesh {best.mesh}")
                break
    return best, spent
