"""Planning time of the redistribution synthesizer (`slicer.redistribution.plan`).

Two suites (the issue's target: every plan under 10 ms for meshes up to 4 axes and arrays up to 4 dims):

* ``meshes``: random source/target types of a 4-dim array on six fixed meshes of 2 to 4 axes, one line
  per mesh, with dims every placement divides;
* ``broad``: the property tests' distribution -- random meshes of 1-4 axes of sizes 1-8, arrays of rank
  1-4, sources with partial sums (some kept by the target), and half the cases with dims divisible only
  by the source's and the target's own tilings (so that divisibility often forbids every normal-form
  plan and the capped search in any order takes over).

Each case is planned ``--repeat`` times
from cold caches (the process-wide layout and permute-target caches are cleared first, as in a fresh
process) and its fastest run is kept, so that a busy machine does not inflate single cases. Time is the
CPU time of the planning call (``time.process_time``): this 2-core machine is shared, and wall-clock time
there measures the other jobs as much as the planner (the JSON has the wall-clock times too). Reports, per
mesh, the median, p90, p99 and max in ms, the share of cases under 10 ms and the share planned at the
traffic lower bound, as JSON (``--json PATH``) and one line per mesh. Plans use the default objective
(estimated time, built-in figures) with sub-axes; ``--cost bytes`` and ``--no-sub-axes`` select the others. A
benchmark, not a test: timings depend on the machine.

    python benchmarks/planning.py [--suite meshes|broad|all] [--cases 300] [--repeat 3] [--json out.json]
                                  [--cost time|bytes] [--no-sub-axes]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time

from slicer.redistribution import DistType, Mesh, plan, search
from slicer.redistribution.costs import CostModel
from slicer.redistribution.layout import Layout

CONFIG = {"cost": CostModel(), "sub_axes": True}  # set by main() from the command line

# Each mesh with a dim size that every product of its axes divides.
MESHES = {
    "4 axes of 2": (Mesh(a=2, b=2, c=2, d=2), 192),
    "2x4x8x3": (Mesh(a=2, b=4, c=8, d=3), 192),
    "3x3x3x3": (Mesh(a=3, b=3, c=3, d=3), 162),
    "2x2x4x4": (Mesh(a=2, b=2, c=4, d=4), 192),
    "2x3x4 (3 axes)": (Mesh(a=2, b=3, c=4), 192),
    "2x2 (1-D pairs)": (Mesh(a=2, b=2), 192),
}


def random_dims(rng: random.Random, axes: list[str], rank: int) -> tuple:
    """Each axis (in random order) lands on a random dim with probability 0.8, else stays unused."""
    order = axes[:]
    rng.shuffle(order)
    dims = [[] for _ in range(rank)]
    for a in order:
        if rng.random() < 0.8:
            dims[rng.randrange(rank)].append(a)
    return tuple(tuple(d) for d in dims)


def cold_plan_ms(mesh: Mesh, src: DistType, dst: DistType, repeat: int):
    """(fastest of ``repeat`` cold plannings in CPU ms, the plan, fastest in wall-clock ms)."""
    best, wall, result = float("inf"), float("inf"), None
    for _ in range(repeat):
        Layout.get.cache_clear()
        search.placements_with_products.cache_clear()
        start, start_wall = time.process_time(), time.perf_counter()
        result = plan(mesh, src, dst, **CONFIG)
        best = min(best, (time.process_time() - start) * 1e3)
        wall = min(wall, (time.perf_counter() - start_wall) * 1e3)
    return best, result, wall


def fixed_mesh_cases(mesh: Mesh, size: int, cases: int, rng: random.Random):
    """``cases`` random (mesh, src, dst) of a ``size^4`` array on ``mesh``, without partial sums."""
    shape = (size,) * 4
    for _ in range(cases):
        src = DistType.of(mesh, shape, random_dims(rng, list(mesh.axis_names), 4), ())
        dst = DistType.of(mesh, shape, random_dims(rng, list(mesh.axis_names), 4), ())
        yield mesh, src, dst


def broad_case(rng: random.Random):
    """One (mesh, src, dst) of the property tests' distribution (see the module docstring)."""
    names = ["x", "y", "z", "w"][: rng.randint(1, 4)]
    mesh = Mesh([(a, rng.randint(1, 8)) for a in names])
    rank = rng.randint(1, 4)
    order = names[:]
    rng.shuffle(order)

    def placement(allow_partial: bool):
        dims, partial = [[] for _ in range(rank)], []
        for a in order:
            where = rng.randint(-2 if allow_partial else -1, rank - 1)
            if where >= 0:
                dims[where].append(a)
            elif where == -2 and rng.random() < 0.5:
                partial.append(a)
        return dims, partial

    src_dims, src_partial = placement(True)
    dst_dims, _ = placement(False)
    dst_partial = [a for a in src_partial if not any(a in d for d in dst_dims) and rng.random() < 0.5]
    # Divisible by every placement: a multiple of the product of all used axes (unless that is huge).
    used = math.prod(mesh.size(a) for a in names) if rng.random() < 0.5 else 1
    if used ** rank > 1 << 24:
        used = 1
    shape = [math.lcm(mesh.group_size(a), mesh.group_size(b)) * rng.choice([1, 2, 3]) * used
             for a, b in zip(src_dims, dst_dims)]
    return mesh, DistType.of(mesh, shape, src_dims, src_partial), DistType.of(mesh, shape, dst_dims, dst_partial)


def measure(problems, repeat: int) -> dict:
    """Planning time statistics over the (mesh, src, dst) in ``problems``."""
    times, walls, at_bound, normal, slowest = [], [], 0, 0, None
    for mesh, src, dst in problems:
        ms, p, wall = cold_plan_ms(mesh, src, dst, repeat)
        times.append(ms)
        walls.append(wall)
        at_bound += p.reaches_lower_bound
        normal += p.is_normal_form
        if slowest is None or ms > slowest[0]:
            slowest = (ms, f"{mesh} {'x'.join(map(str, src.shape))} {src} -> {dst}")
    cases = len(times)
    times.sort()
    pick = lambda q: times[min(cases - 1, int(q * (cases - 1) + 0.5))]  # noqa: E731
    return {"cases": cases, "repeat": repeat, "median_ms": statistics.median(times), "p90_ms": pick(0.9),
            "p99_ms": pick(0.99), "max_ms": times[-1], "over_10ms": sum(t >= 10 for t in times),
            "under_10ms": sum(t < 10 for t in times) / cases, "at_lower_bound": at_bound / cases,
            "normal_form": normal / cases, "slowest": slowest[1], "slowest_ms": slowest[0],
            "wall_median_ms": statistics.median(walls), "wall_max_ms": max(walls)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=("meshes", "broad", "all"), default="all")
    parser.add_argument("--cases", type=int, default=300, help="per mesh; ten times as many in the broad suite")
    parser.add_argument("--repeat", type=int, default=3, help="cold plannings per case; the fastest is kept")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--cost", choices=("time", "bytes"), default="time")
    parser.add_argument("--no-sub-axes", action="store_true")
    args = parser.parse_args()
    CONFIG.update(cost=CostModel() if args.cost == "time" else CostModel.bytes(), sub_axes=not args.no_sub_axes)
    results = {}
    suites = []
    if args.suite in ("meshes", "all"):
        suites += [(name, lambda rng, m=mesh, s=size: fixed_mesh_cases(m, s, args.cases, rng),
                    {"mesh": {a: mesh.size(a) for a in mesh.axis_names}, "shape": [size] * 4})
                   for name, (mesh, size) in MESHES.items()]
    if args.suite in ("broad", "all"):
        suites.append(("broad", lambda rng: (broad_case(rng) for _ in range(10 * args.cases)), {}))
    for name, problems, about in suites:
        r = results[name] = {**about, **measure(problems(random.Random(args.seed)), args.repeat)}
        print(f"{name:>16}: median {r['median_ms']:.2f} ms, p90 {r['p90_ms']:.2f}, p99 {r['p99_ms']:.2f}, "
              f"max {r['max_ms']:.2f}; {r['over_10ms']} over 10 ms; {100 * r['at_lower_bound']:.0f}% at the "
              f"traffic lower bound, {100 * r['normal_form']:.0f}% normal form ({r['cases']} cases)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
