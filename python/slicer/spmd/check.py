"""Check a partitioned program against its unpartitioned original on random data (the oracle of the tests).

    from slicer.spmd.check import partition, compare
    spmd = partition(loop_program_text)                    # slicer-partition on a copy, returns the text
    result = compare(loop_program_text, spmd)              # runs both; result.max_error, result.exact

`compare` runs the original with the JIT (`slicer.lowering.compile_function`, which gives slicer loops their
sequential meaning) and the SPMD function with the in-process simulator on the same random inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mlir import ir

from slicer.dialect import make_context
from slicer.lowering import compile_function
from slicer.passes.pipeline import run_pipeline

from .simulator import SpmdProgram


def partition(module, pipeline: str = "slicer-partition", *, debug_info: bool = False) -> str:
    """Run `pipeline` (default: slicer-partition) on a copy of `module`; returns the SPMD module text
    (with locations, i.e. the collectives' provenance, when `debug_info`)."""
    with make_context(), ir.Location.unknown():
        parsed = ir.Module.parse(module if isinstance(module, str) else str(module))
        run_pipeline(parsed, pipeline)
        return parsed.operation.get_asm(enable_debug_info=debug_info)


@dataclass(frozen=True)
class Comparison:
    inputs: tuple
    expected: tuple
    actual: tuple

    @property
    def max_error(self) -> float:
        return max((float(np.max(np.abs(e.astype(np.float64) - a.astype(np.float64)))) if e.size else 0.0)
                   for e, a in zip(self.expected, self.actual))

    @property
    def exact(self) -> bool:
        return all(np.array_equal(e, a) for e, a in zip(self.expected, self.actual))


def random_inputs(fn, seed: int = 0) -> tuple:
    """Random arrays for the arguments of the compiled function `fn` (the --check-each-step inputs)."""
    from slicer.checking import random_inputs as for_specs

    return tuple(for_specs(fn.inputs, seed))


def compare(original, spmd, *, entry: str | None = None, seed: int = 0, inputs=None,
            reference=None) -> Comparison:
    """Run `original` (JIT) and `spmd` (simulator) on the same random inputs; `reference` may pass an
    already compiled original to save a compile."""
    fn = reference or compile_function(original if isinstance(original, str) else str(original), entry)
    inputs = tuple(inputs) if inputs is not None else random_inputs(fn, seed)
    expected = fn(*inputs)
    actual = SpmdProgram(spmd, entry)(*inputs)
    as_tuple = lambda x: x if isinstance(x, tuple) else (x,)  # noqa: E731
    return Comparison(inputs, as_tuple(expected), as_tuple(actual))
