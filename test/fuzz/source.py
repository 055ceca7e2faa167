"""Where the generators' choices come from.

The program and schedule generators draw every decision through a `Source`
(`integer(lo, hi)` and helpers built on it). Three sources interpret the same
generator code:

- `RandomSource(seed)`: uniform draws from a seeded `random.Random`; it records
  each draw as the offset `value - lo` (the *choice sequence*);
- `ReplaySource(choices)`: replays a recorded choice sequence, clamping an
  offset that no longer fits and answering `lo` once the sequence runs out, so
  *any* list of non-negative ints gives a well-typed case (this is what the
  runner's shrinker edits, see `shrink.py`);
- `HypothesisSource(data)`: draws from hypothesis (`st.data()`), so failures in
  the pytest suite shrink with hypothesis.

Shrinking moves draws towards `lo`, so generators list their options simplest
first and encode "yes" as the larger value (`boolean`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


class Source:
    """Base: subclasses implement `_draw(lo, hi)`; everything else is built on it."""

    def __init__(self) -> None:
        self.choices: list[int] = []

    def _draw(self, lo: int, hi: int) -> int:  # pragma: no cover - abstract
        # Abstract: RandomSource draws fresh choices, ReplaySource replays a recorded (shrunk) sequence,
        # HypothesisSource draws through hypothesis (which shrinks).
        raise NotImplementedError

    def integer(self, lo: int, hi: int) -> int:
        if hi < lo:
            raise ValueError(f"empty range [{lo}, {hi}]")
        if hi == lo:
            return lo  # no draw: keeps choice sequences short and stable
        value = self._draw(lo, hi)
        self.choices.append(value - lo)
        return value

    def choice(self, options: Sequence[T]) -> T:
        if not options:
            raise ValueError("choice from no options")
        return options[self.integer(0, len(options) - 1)]

    def boolean(self, p: float = 0.5) -> bool:
        """True with probability `p` (for random sources); shrinks to False."""
        return self.integer(0, 99) >= round(100 * (1 - p))

    def weighted(self, options: Sequence[tuple[int, T]]) -> T:
        """One of `(weight, value)` pairs, by weight; shrinks towards the first."""
        options = [(w, v) for w, v in options if w > 0]
        total = sum(w for w, _ in options)
        r = self.integer(0, total - 1)
        for w, v in options:
            if r < w:
                return v
            r -= w
        raise AssertionError("unreachable")

    def subset(self, items: Sequence[T], min_size: int = 0) -> list[T]:
        """A sub-list of `items` (order kept) with at least `min_size` items."""
        picked = [x for x in items if self.boolean(0.5)]
        for x in items:
            if len(picked) >= min_size:
                break
            if x not in picked:
                picked.append(x)
        return [x for x in items if x in picked]

    def permutation(self, items: Sequence[T]) -> list[T]:
        rest, out = list(items), []
        while rest:
            out.append(rest.pop(self.integer(0, len(rest) - 1)))
        return out


class RandomSource(Source):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.random = random.Random(seed)

    def _draw(self, lo: int, hi: int) -> int:
        return self.random.randint(lo, hi)


class ReplaySource(Source):
    def __init__(self, choices: Sequence[int]) -> None:
        super().__init__()
        self.given = list(choices)
        self.position = 0

    def _draw(self, lo: int, hi: int) -> int:
        if self.position >= len(self.given):
            return lo
        offset = self.given[self.position]
        self.position += 1
        return lo + max(0, min(offset, hi - lo))


class HypothesisSource(Source):
    def __init__(self, data) -> None:
        super().__init__()
        self.data = data

    def _draw(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st

        return self.data.draw(st.integers(lo, hi))
