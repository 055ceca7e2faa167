"""What a plan costs: estimated time (the default objective) or bytes received.

Time model: a collective finishes when its busiest device has received its data, so a step costs

    latency + (bytes received by the busiest device) / bandwidth

with the latency and bandwidth of the mesh axes it communicates over (the slowest of them, for a group of
several axes; for a permute, the axes along which some sender and its receiver differ). Steps run one
after another, so a plan's time is the sum over its steps; local slices and permutes that move nothing
are free. Plans of equal time are ranked by the bytes received in total, then by the number of steps.
The ``bytes`` objective (``--cost bytes``) ranks by total bytes received, then steps, as before.

Details: docs/module-notes.md, `redistribution/costs.py`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from slicer.core import environment
from slicer.core.errors import RedistributionError
from slicer.core.figure_files import chosen_figures, read_figures, write_figures
from slicer.core.mesh import Mesh

from . import subaxes

#: Built-in figures: MPICH shared memory between 8 oversubscribed ranks on the 2-core development machine,
#: as measured by ``slicer-plan --calibrate`` (medians; see docs/redistribution.md).
DEFAULT_LATENCY = 30e-6
DEFAULT_BANDWIDTH = 2.0e9
FS = 10 ** 15  # search time unit: femtoseconds
HOST, NETWORK = "host", "network"  # the link classes: between ranks of one host, between hosts
OBJECTIVES = ("time", "bytes")
ENV = environment.COST_MODEL.name


@dataclass(frozen=True)
class CostModel:
    """Objective and figures of the cost model (see the module docstring). Hashable, immutable.

    ``axis_latency`` / ``axis_bandwidth``: ``(axis name, figure)`` pairs for axes whose links differ from
    the default (seconds per step, bytes per second and device). ``link_latency`` / ``link_bandwidth``: the
    same per link class (`HOST`, `NETWORK`), measured on a job of ``ranks_per_host`` ranks per host (numbered
    host by host); `for_mesh` gives a mesh's axes their class's figures."""

    objective: str = "time"
    latency: float = DEFAULT_LATENCY
    bandwidth: float = DEFAULT_BANDWIDTH
    axis_latency: tuple[tuple[str, float], ...] = ()
    axis_bandwidth: tuple[tuple[str, float], ...] = ()
    source: str = field(default="built-in", compare=False)
    link_latency: tuple[tuple[str, float], ...] = ()
    link_bandwidth: tuple[tuple[str, float], ...] = ()
    ranks_per_host: int = 0  # 0: not known

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise RedistributionError(f"cost objective '{self.objective}': use one of {', '.join(OBJECTIVES)}")
        for what, value in ([("latency", self.latency)] + [(f"latency of axis '{a}'", v) for a, v in self.axis_latency]
                            + [(f"latency of link '{a}'", v) for a, v in self.link_latency]):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise RedistributionError(f"cost model {what} {value!r}: give a non-negative number of seconds")
        for what, value in ([("bandwidth", self.bandwidth)]
                            + [(f"bandwidth of axis '{a}'", v) for a, v in self.axis_bandwidth]
                            + [(f"bandwidth of link '{a}'", v) for a, v in self.link_bandwidth]):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise RedistributionError(f"cost model {what} {value!r}: give a positive number of bytes per second")

    # -- construction -------------------------------------------------------------------------------------
    @classmethod
    def bytes(cls) -> CostModel:
        return cls(objective="bytes")

    @classmethod
    def from_dict(cls, data: dict, source: str = "") -> CostModel:
        try:
            return cls(objective=data.get("objective", "time"), latency=float(data["latency_s"]),
                       bandwidth=float(data["bandwidth_bytes_per_s"]),
                       axis_latency=tuple(sorted((str(a), float(v)) for a,
                                                 v in data.get("axis_latency_s", {}).items())),
                       axis_bandwidth=tuple(sorted((str(a), float(v)) for a, v in
                                                   data.get("axis_bandwidth_bytes_per_s", {}).items())),
                       source=source,
                       link_latency=tuple(sorted((str(a), float(v)) for a, v in
                                                 data.get("link_latency_s", {}).items())),
                       link_bandwidth=tuple(sorted((str(a), float(v)) for a, v in
                                                   data.get("link_bandwidth_bytes_per_s", {}).items())),
                       ranks_per_host=int(data.get("ranks_per_host", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RedistributionError(
                f"cost model {source or 'data'} is not valid ({exc!r}): it needs latency_s and bandwidth_bytes_per_s "
                "(and optionally axis_latency_s / axis_bandwidth_bytes_per_s maps); rerun slicer-plan --calibrate"
            ) from None

    def to_dict(self) -> dict:
        return {"objective": self.objective, "latency_s": self.latency, "bandwidth_bytes_per_s": self.bandwidth,
                "axis_latency_s": dict(self.axis_latency), "axis_bandwidth_bytes_per_s": dict(self.axis_bandwidth),
                "link_latency_s": dict(self.link_latency), "link_bandwidth_bytes_per_s": dict(self.link_bandwidth),
                "ranks_per_host": self.ranks_per_host}

    @classmethod
    def load(cls, path: str | os.PathLike) -> CostModel:
        data, problem = read_figures(path, "the cost model", "slicer-plan --calibrate")
        if problem:
            raise RedistributionError(problem)
        return cls.from_dict(data, str(path))

    def save(self, path: str | os.PathLike | None = None) -> Path:
        return write_figures(Path(path) if path is not None else calibration_path(), self.to_dict())

    @classmethod
    def default(cls) -> CostModel:
        """The model plans use unless told otherwise: ``$SLICER_COST_MODEL`` (a path, or ``builtin``), else
        the calibration file if there is one, else the built-in figures. A file is read again only when it
        changes (plans ask for the default model every time)."""
        return chosen_figures(environment.COST_MODEL, calibration_path(), cls, cls.load)

    def with_objective(self, objective: str) -> CostModel:
        return replace(self, objective=objective)

    def for_mesh(self, mesh: Mesh) -> CostModel:
        """This model with each axis of `mesh` that has no figures of its own given its link class's
        (`axis_link`), when the model has them; itself otherwise."""
        bandwidths = dict(self.link_bandwidth)
        links = {a: (lat, bandwidths[a]) for a, lat in self.link_latency if a in bandwidths}
        if not links or self.ranks_per_host <= 0:
            return self
        latency, bandwidth = dict(self.axis_latency), dict(self.axis_bandwidth)
        for axis in mesh.axis_names:
            link = links.get(axis_link(mesh, axis, self.ranks_per_host))
            if axis not in latency and link is not None:
                latency[axis], bandwidth[axis] = link
        return replace(self, axis_latency=tuple(sorted(latency.items())),
                       axis_bandwidth=tuple(sorted(bandwidth.items())))

    # -- figures ------------------------------------------------------------------------------------------
    def axis_figures(self, axis: str) -> tuple[float, float]:
        """(latency, bandwidth) of a mesh axis (the whole axis of a sub-axis)."""
        name = subaxes.axis_name(axis)
        return dict(self.axis_latency).get(name, self.latency), dict(self.axis_bandwidth).get(name, self.bandwidth)

    def seconds(self, axes, busiest_bytes: int) -> float:
        """Estimated time of one step communicating over ``axes`` whose busiest device receives
        ``busiest_bytes`` (0 for a step that communicates nothing)."""
        axes = tuple(axes)
        if not axes:
            return 0.0
        figures = [self.axis_figures(a) for a in axes]
        return max(f[0] for f in figures) + busiest_bytes / min(f[1] for f in figures)

    def __str__(self) -> str:
        extra = "".join(f", {a}: {lat * 1e6:.3g} us" for a, lat in self.axis_latency + self.link_latency)
        extra += "".join(f", {a}: {bw / 1e9:.3g} GB/s" for a, bw in self.axis_bandwidth + self.link_bandwidth)
        return (f"{self.objective} (latency {self.latency * 1e6:.3g} us, bandwidth {self.bandwidth / 1e9:.3g} GB/s"
                f"{extra}; {self.source})")


def axis_link(mesh: Mesh, axis: str, ranks_per_host: int) -> str:
    """The link class of a whole mesh axis on a job of `ranks_per_host` ranks per host, numbered host by host
    (row-major device ranks): `HOST` when each of its groups lies within one host, else `NETWORK`."""
    minor = math.prod(mesh.size(a) for a in mesh.axis_names[mesh.axis_index(axis) + 1:])
    span = minor * mesh.size(axis)  # each group lies in an aligned run of `span` consecutive ranks
    return HOST if span <= ranks_per_host and ranks_per_host % span == 0 else NETWORK


def tie_scale(model: CostModel, devices: int, elements: int) -> int:
    """``M`` of the scalar cost ``time * M + total``: larger than the total elements of any plan the search
    could return (a few gathers of the whole array on every device), so time decides first and the total
    only breaks ties (1 for the bytes objective)."""
    return 64 * devices * max(1, elements) + 1 if model.objective == "time" else 1


def calibration_path() -> Path:
    """Where ``slicer-plan --calibrate`` stores its figures."""
    return Path(environment.cache_home()) / "slicer" / "cost_model.json"


class Pricing:
    """A cost model in integers for one search on ``mesh`` (plain axes: the search's, possibly a
    refinement whose parts are named by ``token_of``), with elements of ``itemsize`` bytes.

    ``cost(axes, busiest, total)`` prices a move whose busiest device receives ``busiest`` elements and
    all devices together ``total``; ``bound(busiest, total)`` prices lower bounds on the same two
    quantities for the rest of a plan (with the least latency and the fastest axis, rounded down)."""

    def __init__(self, model: CostModel, mesh: Mesh, itemsize: int, elements: int, token_of=None):
        self.model = model
        self.time = model.objective == "time"
        self.n = mesh.device_count
        token_of = token_of or (lambda a: a)
        self.latency, self.unit = {}, {}
        for a in mesh.axis_names:
            lat, bw = model.axis_figures(token_of(a))
            self.latency[a] = int(round(lat * FS))
            self.unit[a] = math.ceil(itemsize * FS / bw)  # femtoseconds per element
        live = [a for a in mesh.axis_names if mesh.size(a) > 1] or list(mesh.axis_names)
        self.least_latency = min((self.latency[a] for a in live), default=0)
        self.least_unit = min((self.unit[a] for a in live), default=0)
        self.uniform = len({(self.latency[a], self.unit[a]) for a in live}) <= 1
        self.scale = tie_scale(model, self.n, elements)
        self._group: dict = {}

    def _figures(self, axes: tuple) -> tuple[int, int]:
        found = self._group.get(axes)
        if found is None:
            found = self._group[axes] = (max(self.latency[a] for a in axes), max(self.unit[a] for a in axes))
        return found

    def cost(self, axes: tuple, busiest: int, total: int) -> int:
        if not self.time:
            return total
        if not busiest and not total:
            return 0
        lat, unit = self._figures(axes)
        return self.scale * (lat + busiest * unit) + total

    def bound(self, busiest: float, total: int, steps: int = 0) -> int:
        """Lower bound on the cost of the rest of a plan that must still deliver ``busiest`` elements to
        some device (a lower bound on the sum over steps of the busiest device's share) and ``total`` in
        all, in at least ``steps`` communicating steps (at least one if anything is left to deliver)."""
        if not self.time:
            return total
        if steps <= 0:
            if total <= 0 and busiest <= 0:
                return 0
            steps = 1
        elements = max(0, math.ceil(busiest - abs(busiest) * 1e-12 - 1e-9))  # see bounds.whole
        return self.scale * (self.least_latency * steps + elements * self.least_unit) + total


def plan_seconds(plan, model: CostModel) -> float:
    """The estimated time of ``plan`` under ``model`` (the sum over its steps)."""
    return float(sum(step_seconds(plan, i, model) for i in range(len(plan.steps))))


def step_axes(plan, i: int) -> tuple[str, ...]:
    """The axes step ``i`` of ``plan`` communicates over (for a permute: along which a pair differs)."""
    return plan.steps[i].link_axes(plan.mesh)


def step_seconds(plan, i: int, model: CostModel) -> float:
    busiest = int(plan.trace.received[i].max()) * plan.itemsize if plan.trace.received[i].size else 0
    return model.seconds(step_axes(plan, i), busiest)
