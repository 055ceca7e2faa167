"""The cost model: figures, files, the default (environment, calibration file, built-in), errors, a plan's
estimated time, and the integer pricing the search uses."""

import json

import pytest

from slicer.redistribution import CostModel, DistType, Mesh, RedistributionError, plan
from slicer.redistribution.costs import FS, HOST, NETWORK, Pricing, axis_link, tie_scale
from slicer.runtime.collectives.calibration import LINK_AXES, model_from


def test_figures_and_seconds():
    m = CostModel(latency=1e-5, bandwidth=1e9, axis_latency=(("x", 1e-3),), axis_bandwidth=(("x", 1e8),))
    assert m.seconds((), 100) == 0.0  # local steps are free
    assert m.seconds(("y",), 1000) == pytest.approx(1e-5 + 1e-6)
    assert m.seconds(("x", "y"), 1000) == pytest.approx(1e-3 + 1e-5)  # the slowest axis of the group
    assert m.seconds(("x:(1)2",), 1000) == pytest.approx(1e-3 + 1e-5)  # a part uses its axis's links
    assert "x: 1e+03 us" in str(m) and "bandwidth 1 GB/s" in str(m)


def test_files_round_trip_and_default(tmp_path, monkeypatch):
    m = CostModel(latency=2e-5, bandwidth=3e9, axis_bandwidth=(("z", 5e8),))
    path = m.save(tmp_path / "m.json")
    assert CostModel.load(path) == m and json.loads(path.read_text())["axis_bandwidth_bytes_per_s"] == {"z": 5e8}
    monkeypatch.setenv("SLICER_COST_MODEL", str(path))
    assert CostModel.default() == m and CostModel.default().source == str(path)
    monkeypatch.setenv("SLICER_COST_MODEL", "builtin")
    assert CostModel.default() == CostModel()
    monkeypatch.delenv("SLICER_COST_MODEL")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert CostModel.default() == CostModel()  # no calibration yet: built-in figures
    m.save()  # where --calibrate stores it
    assert CostModel.default() == m
    assert plan(Mesh(x=2), DistType.parse("[[x]]", (8,), Mesh(x=2)), DistType.parse("[[]]", (8,), Mesh(x=2))).model == m


def test_figures_per_link_price_an_axis_by_where_its_groups_lie(tmp_path):
    """A job of 2 ranks per host, numbered host by host: on x=2,y=2 x crosses the hosts and y stays within one;
    on x=2,y=4 y crosses too; the links' figures go to the axes that have none of their own."""
    assert {a: axis_link(Mesh(x=2, y=2), a, 2) for a in "xy"} == {"x": NETWORK, "y": HOST}
    assert {a: axis_link(Mesh(x=2, y=4), a, 2) for a in "xy"} == {"x": NETWORK, "y": NETWORK}
    assert axis_link(Mesh(x=4), "x", 8) == HOST  # the whole job on one host
    m = CostModel(latency=1e-5, bandwidth=1e9, link_latency=((HOST, 2e-6), (NETWORK, 1e-4)),
                  link_bandwidth=((HOST, 4e9), (NETWORK, 1e8)), ranks_per_host=2)
    mesh = Mesh(x=2, y=2)
    assert m.for_mesh(mesh).axis_figures("x") == (1e-4, 1e8) and m.for_mesh(mesh).axis_figures("y") == (2e-6, 4e9)
    assert m.for_mesh(mesh).seconds(("x", "y"), 1000) == pytest.approx(1e-4 + 1e-5)  # the slower link
    own = CostModel(axis_latency=(("x", 5e-3),), axis_bandwidth=(("x", 1e6),), link_latency=m.link_latency,
                    link_bandwidth=m.link_bandwidth, ranks_per_host=2)
    assert own.for_mesh(mesh).axis_figures("x") == (5e-3, 1e6)  # an axis's own figures stay
    assert CostModel(latency=1e-5).for_mesh(mesh) == CostModel(latency=1e-5)  # no links measured: unchanged
    assert CostModel.load(m.save(tmp_path / "m.json")) == m
    assert plan(mesh, DistType.parse("[[x]]", (8,), mesh), DistType.parse("[[]]", (8,), mesh), cost=m).model == \
        m.for_mesh(mesh)
    # the calibration's samples: a link's are fitted on their own, not as an axis
    line = [{"axis": axis, "link": link, "op": "permute", "busiest_bytes": b, "seconds": lat + b / bw}
            for link, axis, lat, bw in ((NETWORK, LINK_AXES[NETWORK], 1e-4, 1e8), (HOST, LINK_AXES[HOST], 2e-6, 4e9))
            for b in (8, 1 << 12, 1 << 20)]
    whole = [{k: v for k, v in dict(s, axis="ranks").items() if k != "link"} for s in line[:3]]
    fitted = model_from(whole + line, "ranks", "test", 2)
    fitted_links = dict(zip(dict(fitted.link_latency), zip(dict(fitted.link_latency).values(),
                                                           dict(fitted.link_bandwidth).values())))
    assert fitted.axis_latency == () and fitted.ranks_per_host == 2
    assert fitted_links[NETWORK] == pytest.approx((1e-4, 1e8), rel=1e-6)
    assert fitted_links[HOST] == pytest.approx((2e-6, 4e9), rel=1e-6)


@pytest.mark.parametrize("make, words", [
    (lambda: CostModel(objective="speed"), "use one of time, bytes"),
    (lambda: CostModel(latency=-1), "non-negative number of seconds"),
    (lambda: CostModel(bandwidth=0), "positive number of bytes per second"),
    (lambda: CostModel(axis_bandwidth=(("x", float("inf")),)), "bandwidth of axis 'x'"),
    (lambda: CostModel.from_dict({"latency_s": 1}), "needs latency_s and bandwidth_bytes_per_s"),
    (lambda: CostModel.load("/nonexistent/model.json"), "cannot read the cost model"),
])
def test_errors(make, words):
    with pytest.raises(RedistributionError, match=words):
        make()


def test_bad_files(tmp_path, monkeypatch):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RedistributionError, match="is not JSON"):
        CostModel.load(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(RedistributionError, match="not a JSON object"):
        CostModel.load(tmp_path / "list.json")
    monkeypatch.setenv("SLICER_COST_MODEL", str(tmp_path / "missing.json"))
    with pytest.raises(RedistributionError, match="cannot read the cost model"):
        CostModel.default()


def test_estimated_time_is_the_sum_of_the_steps():
    mesh = Mesh(x=2, y=4)
    p = plan(mesh, DistType.parse("[[x],[y]]", (64, 64), mesh), DistType.parse("[[],[]]", (64, 64), mesh),
             cost=CostModel(latency=1e-5, bandwidth=1e9))
    assert [s.op for s in p.steps] == ["all_gather", "all_gather"]
    assert p.estimated_seconds() == pytest.approx(sum(p.step_seconds()))
    busiest = [int(r.max()) * 4 for r in p.trace.received]
    assert p.step_seconds() == pytest.approx([1e-5 + b / 1e9 for b in busiest])


def test_pricing_orders_time_then_bytes():
    mesh = Mesh(x=2, y=2)
    model = CostModel(latency=1e-5, bandwidth=1e9)
    pricing = Pricing(model, mesh, 4, 1024)
    assert pricing.scale == tie_scale(model, 4, 1024) > 4 * 1024 * 8
    fast_more_bytes = pricing.cost(("x",), 10, 1000)
    slow_fewer_bytes = pricing.cost(("x",), 11, 11)
    assert fast_more_bytes < slow_fewer_bytes  # time first
    assert pricing.cost(("x",), 10, 20) < fast_more_bytes  # then total bytes
    assert divmod(pricing.cost(("x",), 10, 20), pricing.scale) == (round(1e-5 * FS) + 10 * 4 * FS // 10 ** 9, 20)
    assert pricing.bound(0, 0) == 0 and pricing.bound(10, 20,
                                                      2) == pricing.scale * (2 * round(1e-5 * FS) + 40 * 10 ** 6) + 20
    assert Pricing(CostModel.bytes(), mesh, 4, 1024).cost(("x",), 10, 20) == 20
