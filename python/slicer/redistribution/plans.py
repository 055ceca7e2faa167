"""The :class:`Plan` value: a typed sequence of collectives with its costs, text and JSON forms.

Costs are derived by the type interpreter when the plan is built, so a ``Plan`` always type-checks.
``peak_bytes_per_device`` counts, per step, the input block plus the output block (both live while the
collective runs) and is at least the source block; for plans in the normal form of :mod:`.synthesis` it is
``<= max(|src|, |dst|) + max over steps of min(|step input|, |step output|) <= 2 * max(|src|, |dst|)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from slicer.core.errors import RedistributionError
from slicer.core.mesh import Mesh

from .costs import CostModel, step_seconds
from .interpret import Trace, interpret
from .layout import Layout, lower_bound_elements
from .steps import Step
from .types import DistType, format_shape, itemsize


@dataclass(frozen=True)
class Plan:
    mesh: Mesh
    src: DistType
    dst: DistType
    steps: tuple[Step, ...]
    dtype: str = "f32"
    cost_model: CostModel | None = field(default=None, compare=False)
    trace: Trace = field(init=False, repr=False, compare=False)
    lower_bound_elements: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if int(np.prod(self.src.shape, dtype=object)) * self.mesh.device_count * 8 >= 1 << 62:
            raise RedistributionError(f"shape {format_shape(self.src.shape)} on {self.mesh.device_count} "
                                      "devices is too "
                                      "large: byte counts would overflow 64-bit integers")
        layout = Layout.get(self.mesh, self.src.shape)
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "trace", interpret(self.mesh, self.src, self.steps, self.dst, layout))
        object.__setattr__(self, "lower_bound_elements", lower_bound_elements(layout, self.src, self.dst))

    # -- costs (bytes) ------------------------------------------------------------------------------------
    @property
    def itemsize(self) -> int:
        return itemsize(self.dtype)

    @property
    def received_bytes_by_device(self) -> np.ndarray:
        per = self.trace.received_per_device
        if per.size == 0:
            per = np.zeros(self.mesh.device_count, dtype=np.int64)
        return per * self.itemsize

    @property
    def bytes_received_per_device(self) -> int:
        """Maximum over devices of the bytes a device receives during the whole plan."""
        return int(self.received_bytes_by_device.max())

    @property
    def bytes_received_total(self) -> int:
        return int(self.received_bytes_by_device.sum())

    @property
    def lower_bound_bytes_per_device(self) -> int:
        """Max over devices of the bytes of its target block it does not already hold."""
        return int(self.lower_bound_elements.max()) * self.itemsize

    @property
    def lower_bound_bytes_total(self) -> int:
        return int(self.lower_bound_elements.sum()) * self.itemsize

    @property
    def reaches_lower_bound(self) -> bool:
        """Every device receives exactly the part of its target block it did not hold."""
        return bool(np.array_equal(self.received_bytes_by_device, self.lower_bound_elements * self.itemsize))

    @cached_property  # a plan is immutable; sums over many plans read these often
    def src_bytes(self) -> int:
        return self.src.local_size(self.mesh) * self.itemsize

    @cached_property  # a plan is immutable; sums over many plans read these often
    def dst_bytes(self) -> int:
        return self.dst.local_size(self.mesh) * self.itemsize

    @cached_property  # a plan is immutable; sums over many plans read these often
    def peak_bytes_per_device(self) -> int:
        """Max live bytes on a device: the source block, or a step's input plus output block. A run of
        consecutive local slices counts as one step (its blocks in between are views, never copied: the
        MPI executor copies once at the end of the run, and the kernels fuse the slices)."""
        sizes = [t.local_size(self.mesh) for t in self.trace.types]
        local = [step.local for step in self.steps] + [False]
        live = [a + b for i, (a, b) in enumerate(zip(sizes, sizes[1:])) if not (local[i] and local[i + 1])]
        runs = [i for i in range(len(self.steps)) if local[i] and (i == 0 or not local[i - 1])]
        for start in runs:  # input of the run's first slice with the output of its last
            end = start
            while local[end + 1]:
                end += 1
            live.append(sizes[start] + sizes[end + 1])
        return max([self.src_bytes // self.itemsize] + live) * self.itemsize

    @property
    def memory_bound_bytes(self) -> int:
        """``max(|src|, |dst|)`` plus the smaller buffer of the largest in-flight step (see module doc)."""
        types = self.trace.types
        inflight = max((min(a.local_size(self.mesh), b.local_size(self.mesh)) for a, b in zip(types, types[1:])),
                       default=0)
        return max(self.src_bytes, self.dst_bytes) + inflight * self.itemsize

    @property
    def model(self) -> CostModel:
        """The cost model the plan was made for (`CostModel.default` if none was given)."""
        return self.cost_model if self.cost_model is not None else CostModel.default()

    def step_seconds(self, model: CostModel | None = None) -> list[float]:
        """Estimated time of each step (latency + busiest device's bytes / bandwidth, see `costs`)."""
        model = model or self.model
        return [step_seconds(self, i, model) for i in range(len(self.steps))]

    def estimated_seconds(self, model: CostModel | None = None) -> float:
        """Estimated time of the whole plan: the sum over its steps."""
        return float(sum(self.step_seconds(model)))

    @property
    def is_normal_form(self) -> bool:
        """Steps follow ``(all_slice|reduce_scatter)* (all_to_all|permute|all_reduce)* all_gather*``
        (all_reduce may also sit among the slices)."""
        phase = 0
        for step in self.steps:
            want = step.phase
            if want is None:  # all_reduce: anywhere before the gathers
                if phase == 2:
                    return False
                continue
            if want < phase:
                return False
            phase = want
        return True

    # -- presentation -------------------------------------------------------------------------------------
    def step_dicts(self) -> list[dict]:
        out = []
        for step, received, seconds in zip(self.steps, self.trace.received, self.step_seconds()):
            d: dict[str, object] = {"op": step.op}
            d.update(step.fields())
            d["type_after"] = step.type_after.text()
            d["bytes_received_per_device"] = int(received.max()) * self.itemsize
            d["estimated_seconds"] = seconds
            out.append(d)
        return out

    def to_dict(self) -> dict:
        return {
            "mesh": str(self.mesh),
            "shape": format_shape(self.src.shape),
            "dtype": self.dtype,
            "src": self.src.text(),
            "dst": self.dst.text(),
            "steps": self.step_dicts(),
            "bytes_received_per_device": self.bytes_received_per_device,
            "bytes_received_total": self.bytes_received_total,
            "peak_bytes_per_device": self.peak_bytes_per_device,
            "lower_bound_bytes_per_device": self.lower_bound_bytes_per_device,
            "estimated_seconds": self.estimated_seconds(),
            "cost_model": {**self.model.to_dict(), "source": self.model.source},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        lines = [f"mesh {self.mesh}  shape {format_shape(self.src.shape)}  dtype {self.dtype}",
                 f"   {self.src.text()}  ({_fmt_bytes(self.src_bytes)} per device)"]
        for i, d in enumerate(self.step_dicts()):
            args = ", ".join(f"{k}={_fmt_value(v)}" for k, v in d.items()
                             if k not in ("op", "type_after", "bytes_received_per_device", "estimated_seconds"))
            lines.append(f"{i + 1:>2}. {d['op']}({args})  ->  {d['type_after']}  "
                         f"[recv {_fmt_bytes(d['bytes_received_per_device'])}/device, "
                         f"~{_fmt_seconds(d['estimated_seconds'])}]")
        if not self.steps:
            lines.append("    (no communication: source and target types are equal)")
        lines.append(f"received per device {_fmt_bytes(self.bytes_received_per_device)} "
                     f"(lower bound {_fmt_bytes(self.lower_bound_bytes_per_device)}), "
                     f"total {_fmt_bytes(self.bytes_received_total)}, "
                     f"peak per device {_fmt_bytes(self.peak_bytes_per_device)}")
        lines.append(f"estimated time {_fmt_seconds(self.estimated_seconds())} (cost model: {self.model})")
        return "\n".join(lines)


def _fmt_value(v) -> str:
    if isinstance(v, list) and v and isinstance(v[0], list):
        return "[" + ",".join(f"{a}->{b}" for a, b in v) + "]"
    if isinstance(v, list):
        return "[" + ",".join(str(x) for x in v) + "]"
    return str(v)


def _fmt_seconds(t: float) -> str:
    if t >= 1:
        return f"{t:.3g} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} us"


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"
