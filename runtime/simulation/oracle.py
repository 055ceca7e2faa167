"""The test oracle of partitioning: the original program through the JIT and its SPMD form through the
in-process simulator (`Simulator`), on the same inputs (docs/partition.md).

It lives in the runtime because it runs the simulator; it compares results by the one rule of
`slicer.core.compare`, like `--check-each-step` (slicer.checking) and `slicer-run --check`.
"""

from __future__ import annotations

from dataclasses import dataclass

from slicer.checking import as_tuple, random_inputs
from slicer.core.compare import max_difference, same_exactly, same_result
from slicer.lowering import compile_function

from .simulator import Simulator


@dataclass(frozen=True)
class Comparison:
    """The inputs both programs ran on and their results (tuples, one entry per result)."""

    inputs: tuple
    expected: tuple
    actual: tuple

    @property
    def max_error(self) -> float:
        """The largest |difference| over every result (NaN at the same place counts 0, elsewhere infinity)."""
        return max((max_difference(e, a) for e, a in zip(self.expected, self.actual)), default=0.0)

    @property
    def exact(self) -> bool:
        """Every result equal to the original's (NaN equal to NaN at the same place)."""
        return all(same_exactly(e, a) for e, a in zip(self.expected, self.actual))

    @property
    def matches(self) -> bool:
        """Every result the same as the original's under `slicer.core.compare.same_result`."""
        return all(same_result(e, a) for e, a in zip(self.expected, self.actual))


def compare(original, spmd, *, entry: str | None = None, seed: int = 0, inputs=None,
            reference=None) -> Comparison:
    """Run `original` (JIT) and `spmd` (simulator) on the same random inputs; `reference` may pass an
    already compiled original to save a compile."""
    fn = reference or compile_function(original if isinstance(original, str) else str(original), entry)
    inputs = tuple(inputs) if inputs is not None else tuple(random_inputs(fn.inputs, seed))
    expected = fn(*inputs)
    actual = Simulator(spmd, entry)(*inputs)
    return Comparison(inputs, as_tuple(expected), as_tuple(actual))
