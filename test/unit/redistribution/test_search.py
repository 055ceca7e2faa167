"""The A* search behind synthesis: its heuristics are consistent, its search is exact, and its building
blocks (permute targets, block indices, the permute floor) are what their docstrings claim. Every check
runs under both objectives: total bytes, and estimated time (with uniform figures, latency-heavy figures,
and figures of their own for some axes)."""

import itertools
import math

import numpy as np
import pytest

from slicer.redistribution import DistType, Mesh, plan
from slicer.redistribution.costs import FS, CostModel
from slicer.redistribution.layout import Layout
from slicer.redistribution.moves import (
    SWITCH,
    AllReduceMove,
    AllToAllMove,
    GatherMove,
    PermuteMove,
    ReduceScatterMove,
    SliceMove,
    SwitchMove,
)
from slicer.redistribution.search import PlanSearch, placements_with_products
from slicer.redistribution.synthesis import TOLERANCE, reduced


def random_mesh(rng, sizes: list[int], max_axes: int, max_rank: int) -> tuple[list[str], Mesh, int]:
    """(axis names, a mesh of 1..max_axes axes with sizes drawn from ``sizes``, an array rank 1..max_rank)."""
    names = ["x", "y", "z", "w"][: rng.integers(1, max_axes + 1)]
    mesh = Mesh([(n, int(rng.choice(sizes))) for n in names])
    return names, mesh, int(rng.integers(1, max_rank + 1))


def random_dims(rng, names: list[str], rank: int) -> list[list[str]]:
    """Each axis, in random order, on a random dim or (with the same chance as each dim) on none."""
    dims = [[] for _ in range(rank)]
    for a in rng.permutation(names):
        c = int(rng.integers(-1, rank))
        if c >= 0:
            dims[c].append(str(a))
    return dims


def random_case(seed: int, max_axes: int = 4, max_rank: int = 4, partial: bool = True):
    """A random mesh (1..max_axes axes of sizes 2-4), a shape every placement divides, and src/dst types
    (the source possibly with partial sums, some kept by the target)."""
    rng = np.random.default_rng(seed)
    names, mesh, rank = random_mesh(rng, [2, 2, 3, 4], max_axes, max_rank)
    sd, dd = random_dims(rng, names, rank), random_dims(rng, names, rank)
    used_src, used_dst = {a for d in sd for a in d}, {a for d in dd for a in d}
    src_partial = tuple(a for a in names if partial and a not in used_src and rng.random() < 0.3)
    dst_partial = tuple(a for a in src_partial if a not in used_dst and rng.random() < 0.3)
    shape = [mesh.device_count * 2 for _ in range(rank)]
    return mesh, DistType.of(mesh, shape, sd, src_partial), DistType.of(mesh, shape, dd, dst_partial)


def partial_heavy_case(seed: int):
    """Like ``random_case`` but most axes left unused by the source are partial sums there, and the target
    uses most axes: the cases where where and how to resolve the partial sums dominates the plan's cost."""
    rng = np.random.default_rng(seed)
    names, mesh, rank = random_mesh(rng, [2, 2, 3, 4], 4, 3)

    def rand_dims(p_unused):
        dims = [[] for _ in range(rank)]
        for a in rng.permutation(names):
            if rng.random() >= p_unused:
                dims[int(rng.integers(0, rank))].append(str(a))
        return dims

    sd, dd = rand_dims(0.7), rand_dims(0.3)
    used_src, used_dst = {a for d in sd for a in d}, {a for d in dd for a in d}
    src_partial = tuple(a for a in names if a not in used_src and rng.random() < 0.8)
    dst_partial = tuple(a for a in src_partial if a not in used_dst and rng.random() < 0.3)
    shape = [mesh.device_count * 2 for _ in range(rank)]
    return mesh, DistType.of(mesh, shape, sd, src_partial), DistType.of(mesh, shape, dd, dst_partial)


CASES = [pytest.param(random_case, s, id=f"mixed-{s}") for s in range(60)] + [
    pytest.param(partial_heavy_case, s, id=f"partial-{s}") for s in range(30)
]
MODELS = {
    "bytes": CostModel.bytes(),
    "time": CostModel(latency=30e-6, bandwidth=2e9),
    "latency-heavy": CostModel(latency=1e-2, bandwidth=2e9),
    "slow-axes": CostModel(latency=30e-6, bandwidth=2e9, axis_latency=(("y", 1e-3),), axis_bandwidth=(("x", 1e8),)),
}


def search_for(mesh, src, dst, **kw) -> PlanSearch:
    return PlanSearch(mesh, Layout.get(mesh, src.shape), reduced(mesh, src), reduced(mesh, dst), **kw)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("make_case, seed", CASES)
def test_search_is_exact(make_case, seed, model):
    """Exact A* finds the same least cost as a uniform-cost search (no heuristic, no pruning) over the
    same moves -- so no heuristic ever overestimates on these cases -- and ``plan`` (whole axes) is at that
    least cost: exactly for the time objective, and for the bytes objective whenever it equals the lower
    bound, within ``TOLERANCE`` of it otherwise."""
    mesh, src, dst = make_case(seed)
    cost = MODELS[model]
    p = plan(mesh, src, dst, cost=cost, sub_axes=False)
    found = search_for(mesh, src, dst, informed=False, cost=cost).run()
    if found is None:  # no normal-form plan: synthesis used its relaxed search
        assert not p.is_normal_form
        return
    least = found[1]
    search = search_for(mesh, src, dst, cost=cost)
    assert search.run()[1] == least
    if cost.objective == "bytes":
        least *= 4
        if least == p.lower_bound_elements.sum() * 4:
            assert p.bytes_received_total == least
        else:
            assert least <= p.bytes_received_total <= least * (1 + TOLERANCE)
        return
    # time, then total elements: the plan's own figures give the same total and at most the same time (up
    # to the rounding of each step's time to femtoseconds): realisation merges consecutive reduce-scatters
    # onto one dim (one latency fewer) where that is not slower
    seconds, total = divmod(least, search.problem.pricing.scale)
    assert p.bytes_received_total == total * 4
    assert p.estimated_seconds() <= seconds / FS * (1 + 1e-6) + len(p.steps) * 1e-15


@pytest.mark.parametrize("model", ["bytes", "time", "slow-axes"])
@pytest.mark.parametrize("make_case, seed", CASES)
def test_heuristic_is_consistent(make_case, seed, model):
    """h(node) <= cost(move) + h(successor) along every move generated while planning, for the
    shrinking-phase twin moves as well; and h(goal) == 0."""
    mesh, src, dst = make_case(seed)
    search = search_for(mesh, src, dst, cost=MODELS[model])
    checked = 0
    original = search._moves

    def checking_moves(state, phase, permuted):
        h = search.bounds.h(state, phase)
        for move, after, phase2, cost in original(state, phase, permuted):
            h_after = search.bounds.h(after, phase2)
            assert h <= cost + h_after, (state, phase, move, after, phase2, cost, h, h_after)
            nonlocal checked
            checked += 1
            yield move, after, phase2, cost

    original_permutes = search.permute_moves

    def checking_permutes(state, phase):
        h = search.bounds.h(state, phase)
        for move, after, phase2, cost in original_permutes(state, phase):
            assert h <= cost + search.bounds.h(after, phase2), (state, move, after)
            nonlocal checked
            checked += 1
            yield move, after, phase2, cost

    search._moves = checking_moves
    search.permute_moves = checking_permutes
    search.run()
    assert checked > 0 or search.problem.src == search.problem.dst
    assert search.bounds.h(search.problem.dst, 1) == 0 and search.bounds.h(search.problem.dst, 2) == 0


def test_switch_is_free_and_invisible():
    """Moving from shrinking to constant size is a free, stepless node change, never a plan step."""
    mesh = Mesh(a=2, b=4, c=8, d=3)
    shape = (192,) * 4
    src = DistType.parse("[[],[b],[],[]]", shape, mesh)
    dst = DistType.parse("[[b,c],[a,d],[],[]]", shape, mesh)
    search = search_for(mesh, src, dst)
    moves, cost = search.run()
    assert not any(m is SWITCH or isinstance(m, SwitchMove) for m in moves)
    named = (SliceMove, ReduceScatterMove, AllReduceMove, AllToAllMove, GatherMove, PermuteMove)
    assert moves and all(isinstance(m, named) for m in moves)  # named move types, no positional tuples
    assert cost * 4 == plan(mesh, src, dst, cost="bytes", sub_axes=False).bytes_received_total


@pytest.mark.parametrize("sizes, products", [
    ((2, 2, 2, 2), (4, 2, 1, 1)), ((2, 2, 2, 2), (2, 2, 2, 2)), ((2, 4, 8, 3), (8, 1, 3, 1)),
    ((2, 4, 8, 3), (8, 4, 1)), ((3, 3, 2), (3, 1)), ((2, 2), (8, 1)),
])
def test_placements_with_products_match_brute_force(sizes, products):
    """Every ordered placement of the axes (some unused) whose per-dim group sizes are ``products``."""
    axes = tuple((name, k) for name, k in zip("abcd", sizes))
    size = dict(axes)
    expected = set()
    rank = len(products)
    for where in itertools.product(range(-1, rank), repeat=len(axes)):
        chosen = [[a for (a, _), w in zip(axes, where) if w == d] for d in range(rank)]
        if tuple(math.prod(size[a] for a in d) for d in chosen) == products:
            for orders in itertools.product(*(itertools.permutations(d) for d in chosen)):
                expected.add(tuple(orders))
    got = placements_with_products(axes, products)
    assert len(got) == len(set(got)) and set(got) == expected


@pytest.mark.parametrize("sizes", [(2, 2, 2, 2), (2, 4, 8, 3), (3, 2, 4)])
def test_block_index_and_permute_floor(sizes):
    """Block indices agree with the layout's, and two different types with the same local shape differ on
    at least ``1 - 1/s`` of the devices, ``s`` the second smallest axis size (the permute floor)."""
    mesh = Mesh([(name, k) for name, k in zip("abcd", sizes)])
    shape = (mesh.device_count * 4,) * 3
    search = PlanSearch(mesh, Layout.get(mesh, shape), DistType(shape, ((), (), ()), ()),
                        DistType(shape, ((), (), ()), ()))
    axes = tuple((a, mesh.size(a)) for a in mesh.axis_names)
    floor = search.bounds.permute_floor
    assert floor == pytest.approx(1 - 1 / sorted(sizes)[1])
    groups = {}
    for where in itertools.product(range(-1, 3), repeat=len(axes)):
        products = tuple(math.prod(k for (_, k), w in zip(axes, where) if w == d) for d in range(3))
        groups.setdefault(products, None)
    closest = 1.0
    for products in groups:
        types = placements_with_products(axes, products)
        ids = search._block_index(types, products)
        for t, row in zip(types, ids):
            assert np.array_equal(row, search.problem.layout.ids_of(t, ()))
        if len(types) > 1:
            moved = (ids[:, None, :] != ids[None, :, :]).sum(axis=2) / mesh.device_count
            np.fill_diagonal(moved, 1.0)
            closest = min(closest, moved.min())
    assert closest >= floor - 1e-12
    assert closest == pytest.approx(floor)  # the floor is attained: it is the best possible constant


def indivisible_case(seed: int):
    """A random case whose dims are only divisible by the source's and the target's own tilings (not by
    every placement in between), so divisibility often forbids every normal-form plan."""
    rng = np.random.default_rng(seed)
    names, mesh, rank = random_mesh(rng, [2, 3, 4, 5], 4, 3)
    sd, dd = random_dims(rng, names, rank), random_dims(rng, names, rank)
    shape = [math.lcm(mesh.group_size(a), mesh.group_size(b)) * int(rng.choice([1, 2, 3])) for a, b in zip(sd, dd)]
    return mesh, DistType.of(mesh, shape, sd), DistType.of(mesh, shape, dd)


RELAXED_SEEDS = (15, 86, 99, 190, 230, 341, 345, 354, 431, 626, 698, 774, 792, 877, 915, 1093, 1177, 1185, 1273,
                 1317, 1325, 1593, 1816, 1851, 2066)
"""The first 25 seeds of ``indivisible_case`` that have no normal-form plan, written out rather than found
again by 2,067 searches in every test process at collection time (`test_the_relaxed_seeds_need_relaxing`
checks them)."""


def test_the_relaxed_seeds_need_relaxing():
    for seed in RELAXED_SEEDS:
        mesh, src, dst = indivisible_case(seed)
        assert search_for(mesh, src, dst, informed=False).run() is None, seed


@pytest.mark.parametrize("model", ["bytes", "time"])
@pytest.mark.parametrize("seed", RELAXED_SEEDS)
def test_capped_search_is_exact_and_consistent(seed, model):
    """The capped search (any order, blocks at most ``max(|src|, |dst|)``) finds the same least cost
    with its heuristics (growth bound, overlap bound, permute hubs) as without, and its heuristic never
    drops by more than a move's cost."""
    mesh, src, dst = indivisible_case(seed)
    cap = max(src.local_size(mesh), dst.local_size(mesh))
    exact = search_for(mesh, src, dst, cap=cap, informed=False, cost=MODELS[model]).run()
    search = search_for(mesh, src, dst, cap=cap, cost=MODELS[model])
    original_moves, original_permutes = search.moves, search.permute_moves
    checked = 0

    def checked_moves(moves):
        def wrapper(state, phase, *rest):
            nonlocal checked
            h = search.bounds.h(state, phase)
            for move, after, phase2, cost in moves(state, phase, *rest):
                assert h <= cost + search.bounds.h(after, phase2), (state, move, after, cost)
                checked += 1
                yield move, after, phase2, cost
        return wrapper

    search.moves, search.permute_moves = checked_moves(original_moves), checked_moves(original_permutes)
    found = search.run()
    assert (found is None) == (exact is None)
    if found is not None:
        assert found[1] == exact[1] and checked > 0
        assert search.bounds.h(search.problem.dst, 0) == 0
