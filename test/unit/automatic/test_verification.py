"""Verification's fallback while every compiled candidate is over the budget: the best layout by the budget itself,
then the smallest modelled peak of each family of layouts (the axes the data's batch is tiled over) not compiled
yet."""

import slicer
from slicer.automatic import Search, read_sketch
from slicer.automatic.verification import family, other_families

from test_descent import mlp


def _search(budget):
    text = mlp(64, 128, 512)
    sketch = read_sketch(text)
    search = Search(sketch, slicer.Mesh(x=2, y=2), budget=budget)
    search.run(refuse=False)
    return search


def test_family_is_the_axes_of_the_batch():
    search = _search(300_000)
    data = search.data_groups()[0]
    assert family(search, {(data, "x"): 0}) == frozenset({"x"})
    assert family(search, {(data, "x"): 0, (data, "y"): 0}) == frozenset({"x", "y"})
    assert family(search, {(data, "y"): 1}) == frozenset()  # a feature dim is not the batch


def test_other_families_skip_the_compiled_ones_and_pick_each_familys_smallest_peak():
    """First the best layout by the budget itself, whatever its family (the planning margin may have ranked it
    low); then the smallest of each family not compiled."""
    search = _search(300_000)
    data = search.data_groups()[0]
    compiled = [{(data, "x"): 0}]
    first, *found = other_families(search, compiled, set())
    best = min((e for e in search.cache.values() if e is not None), key=lambda e: search.score(e, exact=True))
    assert search.score(search.estimate(first), exact=True) == search.score(best, exact=True)
    families = [family(search, c) for c in found]
    assert frozenset({"x"}) not in families and len(set(families)) == len(families) >= 2
    peaks = [search.estimate(c).peak_bytes for c in found]
    assert peaks == sorted(peaks)
    for c, fam in zip(found, families):  # each the smallest of its family among the layouts priced
        same = [e.peak_bytes for k, e in search.cache.items() if e is not None and family(search, dict(k)) == fam]
        assert search.estimate(c).peak_bytes == min(same)
