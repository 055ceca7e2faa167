"""The result of a search and its explanation: the tactics (the user's first), the predicted time and memory,
and for each decision what it saves against replicating and what the runner-up would cost."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from slicer.core.mesh import Mesh
from slicer.tactics import Tactic, format_tactics

from .cost_model import Estimate
from .descent import Decision, Predicted
from .options import format_bytes


@dataclass(frozen=True)
class AutoResult:
    """What `slicer.auto` chose: `tactics` (ordinary tactics, the user's own first), `predicted_seconds`
    (compute, communication exposed and overlapped, total), `memory_bytes` (peak per device: the compiled kernel
    graph's when the candidates were compiled, `compiled`, else the model's), the search's own figures, and
    `explain()`. `text()` is the tactics' text form (`slicer.parse_tactics` reads it)."""

    tactics: tuple[Tactic, ...]
    predicted_seconds: Predicted
    memory_bytes: int
    mesh: Mesh
    budget: int | None
    objective: str
    search_seconds: float
    evaluations: int
    decide: Callable[[], tuple[Decision, ...]] | None = field(default=None, repr=False, compare=False)
    user_tactics: int = 0
    replicated: Estimate | None = field(default=None, repr=False)
    collectives: tuple = field(default=(), repr=False)
    compiled: tuple = field(default=(), repr=False)  # verification.Compiled, in the order compiled
    why_remat: str = ""
    """Why the tactics end in a `Remat` (rematerialisation): only with it does a layout fit the budget."""

    @functools.cached_property
    def decisions(self) -> tuple[Decision, ...]:
        """Every variable of the search with its value and its alternatives' estimates, priced when first asked
        (for `explain`: up to a hundred tilings on a training step, work the answer need not wait for)."""
        return tuple(self.decide()) if self.decide is not None else ()

    def text(self) -> str:
        return format_tactics(self.tactics)

    def __str__(self) -> str:
        return self.text()

    def explain(self) -> str:
        p = self.predicted_seconds
        budget = f", budget {format_bytes(self.budget)}" if self.budget is not None else ""
        lines = [f"automatic partitioning on mesh {self.mesh} (objective {self.objective}{budget}): "
                 f"{self.evaluations} tilings priced in {self.search_seconds:.2f} s",
                 f"tactics: {self.text() or '(none: everything replicated)'}",
                 f"predicted per run: {_ms(p.total)} = compute {_ms(p.compute)} + communication exposed "
                 f"{_ms(p.exposed)} (overlapped {_ms(p.overlapped)}); "
                 f"peak {format_bytes(self.memory_bytes)} per device"]
        if self.replicated is not None:
            r = self.replicated
            lines.append(f"everything replicated would take {_ms(r.total)} and {format_bytes(r.peak_bytes)} per "
                         "device")
        if self.user_tactics:
            lines.append(f"the first {self.user_tactics} tactics are yours, kept as given")
        if self.why_remat:
            lines.append(self.why_remat)
        lines.append("decisions (group over axis: choice; what it saves; the runner-up):")
        chosen = self._estimate()
        for d in self.decisions:
            lines.append("  " + self._decision(d, chosen))
        lines += self._compiled()
        if self.collectives:
            where = "in the compiled program" if self.compiled else "expected"
            lines.append(f"collectives {where}:")
            lines += [f"  {kind} over {','.join(axes)}: {count} x, {_ms(seconds)} in all"
                      for (kind, axes), (count, seconds) in sorted(self.collectives)]
        return "\n".join(lines)

    def _compiled(self) -> list[str]:
        """What compiling the best candidates said: each one's compiled cost against the model's."""
        if not self.compiled:
            return ["(not compiled: the figures are the search model's)"]
        lines = [f"compiled and priced on their kernel graphs ({len(self.compiled)} best candidates; the model's "
                 "figure in brackets):"]
        for c in self.compiled:
            e, m = c.estimate, c.model
            model = f" [model {_ms(m.total)}, {format_bytes(m.peak_bytes)}]" if m is not None else ""
            fits = "" if self._fits(e) else " (over the budget)"
            lines.append(f"  {format_tactics(c.tactics) or '(replicated)'}: {_ms(e.total)}, "
                         f"{format_bytes(e.peak_bytes)}{fits}{model}; compiled in {c.seconds:.2f} s")
        return lines

    def _estimate(self) -> Estimate:
        p = self.predicted_seconds
        return Estimate(p.compute, p.exposed, p.overlapped, self.memory_bytes)

    def _decision(self, d: Decision, chosen: Estimate) -> str:
        count = len(d.group.members)
        what = f"{d.group.key}{f' ({count} arguments)' if count > 1 else ''} over {d.axis}: "
        what += "replicated" if d.dim is None else f"tile dim {d.dim}"
        fitting = [(v, e) for v, e in d.alternatives if e is not None and self._fits(e)]
        replicated = next((e for v, e in d.alternatives if v is None), None)
        if d.dim is not None and replicated is not None:
            saves = [f"{_ms(replicated.total - chosen.total)} time" if replicated.total > chosen.total else "",
                     f"{format_bytes(replicated.peak_bytes - chosen.peak_bytes)} peak"
                     if replicated.peak_bytes > chosen.peak_bytes else ""]
            saves = [s for s in saves if s]
            what += f"; saves {' and '.join(saves) or 'nothing measurable (a tie)'} against replicated"
            if not self._fits(replicated):
                what += f" (replicated needs {format_bytes(replicated.peak_bytes)}: over the budget)"
        if fitting:
            value, est = min(fitting, key=lambda ve: (ve[1].total, ve[1].peak_bytes))
            name = "replicated" if value is None else f"dim {value}"
            what += f"; runner-up {name}: {_ms(est.total)}, {format_bytes(est.peak_bytes)}"
        elif d.alternatives:
            what += "; every other choice exceeds the budget"
        return what

    def _fits(self, est: Estimate) -> bool:
        return self.budget is None or est.peak_bytes <= self.budget


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"
