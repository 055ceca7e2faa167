"""Verification's fallback while every compiled candidate is over the budget: the best tiling by the budget itself,
then the smallest modelled peak of each family of tilings (the axes the data's batch is tiled over), fastest first;
and, without a budget, the best distinct tilings."""

from test_descent import mlp

import slicer
from slicer.automatic import TacticSearch, read_sketch
from slicer.automatic.verification import family, other_families
from slicer.tactics import format_tactics


def _search(budget):
    return _searched(budget)[0]


def _searched(budget):
    """The search on an MLP over 2x2 and its choice."""
    text = mlp(64, 128, 512)
    sketch = read_sketch(text)
    search = TacticSearch(sketch, slicer.Mesh(x=2, y=2), budget=budget)
    choice, _ = search.run(refuse=False)
    return search, choice


def test_family_is_the_axes_of_the_batch():
    search = _search(300_000)
    data = search.data_groups()[0]
    assert family(search, {(data, "x"): 0}) == frozenset({"x"})
    assert family(search, {(data, "x"): 0, (data, "y"): 0}) == frozenset({"x", "y"})
    assert family(search, {(data, "y"): 1}) == frozenset()  # a feature dim is not the batch


def test_other_families_pick_each_familys_smallest_peak_fastest_first():
    """First the best tiling by the budget itself, whatever its family (the planning margin may have ranked it
    low); then the smallest of each family not tried, the compiled ones' own included (its most sharded tiling),
    ordered by the objective: under the budget by the model first, fastest first."""
    search = _search(300_000)
    data = search.data_groups()[0]
    tried = {format_tactics(search.tactics({(data, "x"): 0}))}
    first, *found = other_families(search, tried)
    best = min((e for e in search.cache.values() if e is not None), key=lambda e: search.score(e, exact=True))
    assert search.score(search.estimate(first), exact=True) == search.score(best, exact=True)
    families = [family(search, c) for c in found]
    assert len(set(families)) == len(families) >= 2 and frozenset({"x"}) in families + [family(search, first)]
    scores = [search.score(search.estimate(c), exact=True) for c in found]
    assert scores == sorted(scores)
    for c, fam in zip(found, families):  # each the smallest of its family among the tilings priced and not tried
        same = [e.peak_bytes for k, e in search.cache.items() if e is not None and family(search, dict(k)) == fam
                and format_tactics(search.tactics(dict(k))) not in tried]
        assert search.estimate(c).peak_bytes == min(same)
    assert all(format_tactics(search.tactics(c)) not in tried for c in [first, *found])


def test_distinct_candidates_leave_out_the_tilings_priced_like_one_before():
    """Without a budget, verification compiles the best tilings the model tells apart: of tilings priced alike
    (within 1% in time and peak: a tiled bias), only the best is listed; the plain ranking lists them all."""
    from slicer.automatic.verification import _same, candidates

    search, choice = _searched(None)
    plain = candidates(search, choice, 8)
    distinct = candidates(search, choice, 8, distinct=True)
    estimates = [search.estimate(c) for c in distinct]
    assert all(not _same(a, b) for i, a in enumerate(estimates) for b in estimates[:i])
    assert distinct[0] == plain[0]
    plain_estimates = [search.estimate(c) for c in plain]
    assert any(_same(a, b) for i, a in enumerate(plain_estimates) for b in plain_estimates[:i])  # the case arises
