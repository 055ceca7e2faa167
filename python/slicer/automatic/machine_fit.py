"""The `Machine` figures that make compiled programs' prices (`graph_cost.price_graph`) match their measured times:
what `slicer-plan --calibrate kernels` fits to the probe programs it runs on this machine.

The fit is on the price the search itself uses for compiled programs, not on a formula of its own, so whatever
the pricing counts (a kernel's ops as compiled, the collectives' lag and work, the max of an op's FLOPs and bytes)
is fitted as it is charged. It scales the starting (built-in) figures in seven groups (`SCALED_TOGETHER`: the
contraction rate, the other ops' arithmetic rate, the bandwidth of data in cache, that of data read from memory
(`cache_reads.py`), the fixed costs, the cost per array a kernel takes or returns, a collective's own costs),
keeping the ratios within a group, which came from whole programs: a handful of probes pins seven scales down from
run to run, not eight figures. It minimises the squared log-ratios of predicted to
measured times (relative errors: a short probe and a long one count alike) over the scales' logarithms, with a
weak pull towards the starting figures (`PRIOR`): a group no probe exercises (on one rank, the collectives') keeps
its figures. Levenberg-Marquardt with a forward-difference Jacobian, from 16 starts (`fit_machine`): seven scales
and a few probes, so a few thousand pricings of small graphs (a second); numpy has no non-linear least squares and
SciPy is not a dependency for this one use.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from slicer.core.errors import AutoError
from slicer.lowering.kernel_graph import KernelGraph

from .graph_cost import graph_kernels, price_graph
from .machine import FIGURES, Machine

#: The weight of the pull towards the starting figures, per group, against one probe's squared log-ratio.
PRIOR = 1e-4
ITERATIONS = 200
STEP = 1e-4  # the Jacobian's step in log-scales
#: The figures fitted as one scale per group: the contraction rate, the other ops' arithmetic rate, the
#: bandwidths of data in cache and from memory, the fixed costs, the cost per kernel array (per op, kernel and
#: run), a collective's own costs. The built-in figures' ratios within a group come from whole programs (GPT
#: forwards and training steps); a few probes cannot separate them (the fit of every figure on its own swung
#: widely from run to run of the same probes).
SCALED_TOGETHER = (("contraction_flops",), ("vector_flops",), ("bandwidth",), ("memory_bandwidth",),
                   ("op_seconds", "kernel_seconds", "run_seconds"), ("array_seconds",),
                   ("sync_seconds", "collective_seconds"))


def fit_machine(samples: Sequence[tuple[KernelGraph, float]], comm, start: Machine | None = None,
                source: str = "fitted") -> Machine:
    """The figures (`machine.FIGURES`) under which `price_graph` predicts each sample's measured seconds best
    (see the module docstring), starting from `start` (the built-in figures). `samples`: (compiled program's
    kernel graph, its measured seconds per run)."""
    start = start or Machine()
    if not samples:
        raise AutoError("a machine fit needs at least one measured program")
    for _, seconds in samples:
        if not (math.isfinite(seconds) and seconds > 0):
            raise AutoError(f"a measured time of {seconds!r} s cannot be fitted: give positive seconds per run")
    read = [(graph, graph_kernels(graph), graph.peak_bytes_per_device()[0], seconds) for graph, seconds in samples]
    base = np.log([getattr(start, name) for name in FIGURES])
    group_of = [next(i for i, group in enumerate(SCALED_TOGETHER) if name in group) for name in FIGURES]
    origin = np.zeros(len(SCALED_TOGETHER))

    def machine(x) -> Machine:
        return replace(start, source=source, **{name: float(math.exp(b + x[g]))
                                                for name, b, g in zip(FIGURES, base, group_of)})

    def residuals(x) -> np.ndarray:
        m = machine(x)
        errors = [math.log(price_graph(g, m, comm, kernels, peak).total / seconds)
                  for g, kernels, peak, seconds in read]
        return np.concatenate([errors, math.sqrt(PRIOR) * (x - origin)])

    # An op other than a contraction costs the slower of its arithmetic and its bytes, so the fit has a valley
    # per way of splitting the ops between the two: descend from the built-in scales and from the two rates
    # factors of 4 and 16 up or down each, and keep the best (the two bandwidths shifted alike).
    vector, bandwidths = SCALED_TOGETHER.index(("vector_flops",)), [SCALED_TOGETHER.index(("bandwidth",)),
                                                                     SCALED_TOGETHER.index(("memory_bandwidth",))]
    starts = []
    for flops_shift, bytes_shift in itertools.product((0.0, -math.log(4), math.log(4), math.log(16)), repeat=2):
        start_x = origin.copy()
        start_x[vector] = flops_shift
        start_x[bandwidths] = bytes_shift
        starts.append(start_x)
    best = min((_descend(residuals, x) for x in starts), key=lambda found: found[1] @ found[1])
    return machine(best[0])


def _descend(residuals, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Levenberg-Marquardt from `x`: (the scales it ends at, their residuals)."""
    damping = 1e-2
    r = residuals(x)
    for _ in range(ITERATIONS):
        jacobian = np.empty((len(r), len(x)))
        for j in range(len(x)):
            moved = x.copy()
            moved[j] += STEP
            jacobian[:, j] = (residuals(moved) - r) / STEP
        normal = jacobian.T @ jacobian
        gradient = jacobian.T @ r
        step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-9), -gradient)
        step = np.clip(step, -2.0, 2.0)  # at most a factor e^2 per iteration: the pricing has kinks (max, waits)
        trial = x + step
        found = residuals(trial)
        if found @ found < r @ r:
            x, r, damping = trial, found, damping / 3
            if np.max(np.abs(step)) < 1e-5:
                break
        else:
            damping *= 4
            if damping > 1e8:
                break
    return x, r


def relative_errors(samples: Sequence[tuple[KernelGraph, float]], machine: Machine, comm) -> list[float]:
    """Each sample's predicted / measured - 1 under `machine`."""
    return [price_graph(graph, machine, comm).total / seconds - 1 for graph, seconds in samples]
