"""Planning time of the redistribution synthesizer (`slicer.redistribution.plan`).

Random source/target types on meshes of up to 4 axes and arrays of 4 dims (the issue's
target: under 10 ms each), plus fixed hard cases. Reports median, p90 and max in ms,
as JSON (`--json PATH`) and a line per suite. A benchmark, not a test: timings depend
on the machine's load.

    python benchmarks/planning.py [--cases 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from slicer.redistribution import DistType, Mesh, plan

MESHES = {"4 axes of 2": Mesh(a=2, b=2, c=2, d=2), "2x4x8x3": Mesh(a=2, b=4, c=8, d=3), "2x2 (1-D pairs)": Mesh(a=2, b=2)}


def random_dims(rng: random.Random, axes: list[str], rank: int) -> tuple:
    order = axes[:]
    rng.shuffle(order)
    dims = [[] for _ in range(rank)]
    for a in order:
        if rng.random() < 0.8:
            dims[rng.randrange(rank)].append(a)
    return tuple(tuple(d) for d in dims)


def measure(mesh: Mesh, cases: int, seed: int) -> dict:
    rng = random.Random(seed)
    shape = tuple(192 for _ in range(4))  # divisible by any product of these meshes' axes
    times = []
    for _ in range(cases):
        src = DistType.of(mesh, shape, random_dims(rng, list(mesh.axis_names), 4), ())
        dst = DistType.of(mesh, shape, random_dims(rng, list(mesh.axis_names), 4), ())
        start = time.perf_counter()
        plan(mesh, src, dst)
        times.append((time.perf_counter() - start) * 1e3)
    times.sort()
    return {"cases": cases, "median_ms": statistics.median(times), "p90_ms": times[int(0.9 * (len(times) - 1))],
            "max_ms": times[-1], "under_10ms": sum(t < 10 for t in times) / len(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    results = {name: measure(mesh, args.cases, args.seed) for name, mesh in MESHES.items()}
    for name, r in results.items():
        print(f"{name:>16}: median {r['median_ms']:.2f} ms, p90 {r['p90_ms']:.2f} ms, max {r['max_ms']:.2f} ms, "
              f"{100 * r['under_10ms']:.0f}% under 10 ms ({r['cases']} random cases)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
