"""The `Machine` figures that make compiled programs' prices (`graph_cost.price_graph`) match their measured times:
what `slicer-plan --calibrate kernels` fits to the probe programs it runs on this machine.

The fit is on the price the search itself uses for compiled programs, not on a formula of its own, so whatever
the pricing counts (a kernel's ops as compiled, the collectives' lag and work, the max of an op's FLOPs and bytes)
is fitted as it is charged. It minimises the squared log-ratios of predicted to measured times (relative errors:
a 30 us probe and a 3 ms one count alike) over the figures' logarithms (they stay positive), with a weak pull
towards the starting figures (`PRIOR`): a figure no probe exercises (on one rank, the collectives') keeps its
value instead of drifting. Levenberg-Marquardt with a forward-difference Jacobian: eight figures and a few
probes, so a few hundred pricings of small graphs; numpy has no non-linear least squares and SciPy is not a
dependency for this one use.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np

from slicer.core.errors import AutoError
from slicer.lowering.kernel_graph import KernelGraph

from .graph_cost import graph_kernels, price_graph
from .machine import FIGURES, Machine

#: The weight of the pull towards the starting figures, per figure, against one probe's squared log-ratio.
PRIOR = 1e-4
ITERATIONS = 200
STEP = 1e-4  # the Jacobian's step in log-figures


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
    read = [(graph, graph_kernels(graph), seconds) for graph, seconds in samples]
    origin = np.log([getattr(start, name) for name in FIGURES])

    def machine(x) -> Machine:
        return replace(start, source=source, **{name: float(math.exp(v)) for name, v in zip(FIGURES, x)})

    def residuals(x) -> np.ndarray:
        m = machine(x)
        errors = [math.log(price_graph(g, m, comm, kernels).total / seconds) for g, kernels, seconds in read]
        return np.concatenate([errors, math.sqrt(PRIOR) * (x - origin)])

    x, damping = origin.copy(), 1e-2
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
    return machine(x)


def relative_errors(samples: Sequence[tuple[KernelGraph, float]], machine: Machine, comm) -> list[float]:
    """Each sample's predicted / measured - 1 under `machine`."""
    return [price_graph(graph, machine, comm).total / seconds - 1 for graph, seconds in samples]
