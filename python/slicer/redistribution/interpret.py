"""Type interpreter: re-derives every step's type from the previous one and totals the costs.

This is the static check of a plan: the type after each step must follow from the type before it by the
step's typing rule (and equal the ``type_after`` the step carries); the last type must be the target.
It also computes, per device, the elements received and the live bytes of each step (input + output).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh

from .layout import Layout
from .steps import Step, apply_rule
from .types import DistType


@dataclass(frozen=True)
class Trace:
    """Types and per-device costs of a plan, as derived by :func:`interpret`."""
    types: tuple[DistType, ...]          # len(steps) + 1: the source, then the type after each step
    received: tuple[np.ndarray, ...]     # per step: elements received per device
    live_elements: tuple[int, ...]       # per step: input block + output block, per device

    @property
    def received_per_device(self) -> np.ndarray:
        if not self.received:
            return np.zeros(0, dtype=np.int64)
        return np.sum(self.received, axis=0)


def interpret(mesh: Mesh, src: DistType, steps: Sequence[Step], dst: DistType | None = None,
              layout: Layout | None = None) -> Trace:
    """Type-check ``steps`` from ``src`` (and, if given, that they end at ``dst``)."""
    layout = layout or Layout.get(mesh, src.shape)
    types = [src]
    received = []
    live = []
    current = src
    for i, step in enumerate(steps):
        derived = apply_rule(step, current, mesh, layout)
        if derived != step.type_after:
            raise RedistributionError(
                f"step {i} ({step.op}) claims type {step.type_after} but its typing rule gives {derived} "
                f"from {current}")
        received.append(step.received(current, layout))
        live.append(current.local_size(mesh) + derived.local_size(mesh))
        types.append(derived)
        current = derived
    if dst is not None and current != dst:
        raise RedistributionError(f"the plan ends at {current}, not at the target {dst}")
    return Trace(tuple(types), tuple(received), tuple(live))
