"""Property tests over random meshes (1-4 axes, sizes 1-8), shapes and source/target types.

Every plan type-checks (the interpreter re-derives each type), the simulator agrees on real data, the plan
is deterministic, never worse than the naive plan, in normal form with peak memory within the stated bound
whenever a normal-form plan exists, and at the traffic lower bound unless the diagnosis names why not and
exact searches prove the reason (`gaps.Diagnosis.check`).
2,000 cases by default, 20,000 with SLICER_NIGHTLY=1. The tally of unreached bounds is printed at the end.
"""

import collections
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slicer.redistribution import DistType, Mesh, plan, simulate
from slicer.redistribution.gaps import PARTIAL, diagnose
from slicer.redistribution.synthesis import naive_plan

CASES = 20_000 if os.environ.get("SLICER_NIGHTLY") == "1" else 2_000
SIMULATE_ELEMENTS = 1 << 15
TALLY: collections.Counter = collections.Counter()
EXAMPLES: dict = {}


@st.composite
def problems(draw):
    n = draw(st.integers(1, 4))
    names = ["x", "y", "z", "w"][:n]
    mesh = Mesh([(a, draw(st.integers(1, 8))) for a in names])
    rank = draw(st.integers(1, 4))
    order = draw(st.permutations(names))

    def placement(allow_partial):
        dims, partial = [[] for _ in range(rank)], []
        for a in order:
            where = draw(st.integers(-2 if allow_partial else -1, rank - 1))
            if where >= 0:
                dims[where].append(a)
            elif where == -2 and draw(st.booleans()):
                partial.append(a)
        return dims, partial
    sd, sp = placement(True)
    dd, _ = placement(False)
    dp = [a for a in sp if not any(a in d for d in dd) and draw(st.booleans())]
    divisible = draw(st.booleans())
    used = int(np.prod([mesh.size(a) for d in sd + dd for a in set(d)])) if divisible else 1
    if used ** rank > 1 << 24:  # keep byte counts far from 64-bit overflow
        used = 1
    shape = []
    for a, b in zip(sd, dd):
        ka, kb = mesh.group_size(a), mesh.group_size(b)
        base = ka * kb // int(np.gcd(ka, kb))
        shape.append(base * draw(st.sampled_from([1, 2, 3])) * (used if divisible else 1))
    return mesh, DistType.of(mesh, shape, sd, sp), DistType.of(mesh, shape, dd, dp)


@settings(max_examples=CASES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problems())
def check_problem(problem):
    mesh, src, dst = problem
    p = plan(mesh, src, dst)                      # the Plan constructor runs the type interpreter
    assert p.trace.types[0] == src and p.trace.types[-1] == dst
    assert plan(mesh, src, dst).steps == p.steps  # deterministic
    assert (p.received_bytes_by_device >= p.lower_bound_elements * p.itemsize).all()
    naive = naive_plan(mesh, src, dst)
    assert p.bytes_received_total <= naive.bytes_received_total
    if p.is_normal_form:
        bound = max(p.src_bytes, p.dst_bytes)
        assert all(t.local_size(mesh) * p.itemsize <= bound for t in p.trace.types)
        assert p.peak_bytes_per_device <= p.memory_bound_bytes <= 2 * bound
        assert p.peak_bytes_per_device <= naive.peak_bytes_per_device
    if int(np.prod(src.shape)) <= SIMULATE_ELEMENTS and mesh.device_count <= 512:
        simulate(p, (np.arange(int(np.prod(src.shape))) % 1009).astype(np.float32).reshape(src.shape))
        TALLY["simulated"] += 1
    diagnosis = diagnose(p)
    if diagnosis is not None:
        diagnosis.check()  # the reason is proven by exact searches, and the plan is within tolerance
    reason = None if diagnosis is None else diagnosis.reason
    TALLY["cases"] += 1
    TALLY["plans in normal form" if p.is_normal_form else "plans not in normal form (indivisible shape)"] += 1
    key = "lower bound reached" if reason is None else reason
    TALLY[key] += 1
    if reason is not None and reason != PARTIAL:
        EXAMPLES.setdefault(reason, f"{mesh} {'x'.join(map(str, src.shape))} {src} -> {dst}")


def test_random_redistributions(capsys):
    check_problem()
    assert TALLY["cases"] >= CASES * 0.9
    lines = [f"redistribution property tests: {TALLY['cases']} cases, {TALLY['simulated']} simulated"]
    for key, count in TALLY.most_common():
        if key not in ("cases", "simulated"):
            lines.append(f"  {count:6d}  {key}")
    for reason, example in EXAMPLES.items():
        lines.append(f"  e.g. [{reason[:40]}...] {example}")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
