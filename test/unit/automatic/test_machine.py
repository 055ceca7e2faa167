"""The kernel figures the search prices with (`slicer.automatic.machine`): stored and read back, chosen by
$SLICER_MACHINE, bad files refused with what to do; and the fit (`machine_fit`) recovering figures from the times
they price the probe programs at."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import pytest

import slicer
from slicer.automatic.graph_cost import price_graph
from slicer.automatic.machine import ENV, FIGURES, Machine
from slicer.automatic.machine_fit import SCALED_TOGETHER, fit_machine, relative_errors
from slicer.core.errors import AutoError
from slicer.redistribution.costs import CostModel
from slicer.tools.machine_probes import probes


def test_figures_round_trip_and_the_environment_chooses_them(tmp_path, monkeypatch):
    fast = replace(Machine(), contraction_flops=3e11, run_seconds=2e-5)
    path = fast.save(tmp_path / "machine.json")
    assert Machine.load(path) == fast and str(path) in Machine.load(path).source
    monkeypatch.setenv(ENV, str(path))
    assert Machine.default() == fast
    monkeypatch.setenv(ENV, "builtin")
    assert Machine.default() == Machine()
    monkeypatch.setenv(ENV, str(tmp_path / "missing.json"))
    with pytest.raises(AutoError, match="cannot read the machine figures"):
        Machine.default()


@pytest.mark.parametrize("content, message", [
    ("not json", "is not JSON"),
    ("[1, 2]", "not a JSON object"),
    (json.dumps({"contraction_flops": -1.0}), "contraction_flops = -1.0"),
    (json.dumps({"contraction_flops": "fast"}), "are not numbers"),
    (json.dumps({"gflops": 1.0}), "name gflops, which are not figures"),
    (json.dumps({"overlap": 2.0}), "overlap = 2.0"),
])
def test_bad_files_say_what_to_do(tmp_path, content, message):
    path = tmp_path / "machine.json"
    path.write_text(content)
    with pytest.raises(AutoError, match=message):
        Machine.load(path)


@pytest.fixture(scope="module")
def probe_graphs():
    """The calibration's probe programs for 2 ranks, compiled."""
    mesh = slicer.Mesh({"x": 2})
    graphs = []
    for probe in probes(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graphs.append(slicer.compile(probe.text, mesh=mesh, tactics=slicer.parse_tactics(probe.tactics)).graph)
    return graphs


@pytest.mark.slow
def test_the_fit_finds_figures_that_price_the_probes_as_measured(probe_graphs):
    """Times priced by a machine unlike the built-in one (contractions 2x faster, other ops 4x, overheads 5x
    smaller) are fitted from the built-in start to within 2% on every probe, and the contraction rate the large
    matmul pins down within 5%."""
    comm = CostModel()
    truth = replace(Machine(), contraction_flops=3e11, vector_flops=1.2e10, bandwidth=1.6e11, op_seconds=1e-6,
                    kernel_seconds=4e-6, run_seconds=2e-5, collective_seconds=2e-5, sync_seconds=1e-5)
    samples = [(graph, price_graph(graph, truth, comm).total) for graph in probe_graphs]
    fitted = fit_machine(samples, comm)
    assert max(abs(e) for e in relative_errors(samples, fitted, comm)) < 0.02
    assert max(abs(e) for e in relative_errors(samples, Machine(), comm)) > 0.5  # the start was far off
    assert fitted.contraction_flops == pytest.approx(truth.contraction_flops, rel=0.05)
    assert fitted.source == "fitted" and fitted.overlap == Machine().overlap


@pytest.mark.slow
def test_a_figure_no_probe_exercises_keeps_its_starting_value(probe_graphs):
    """On one rank there are no collectives: their figures stay where they started."""
    comm = CostModel()
    one_rank = [g for g, probe in zip(probe_graphs, probes(2)) if not probe.collective]
    samples = [(graph, price_graph(graph, Machine(), comm).total * 0.5) for graph in one_rank]
    fitted = fit_machine(samples, comm)
    assert fitted.collective_seconds == pytest.approx(Machine().collective_seconds, rel=1e-6)
    assert fitted.sync_seconds == pytest.approx(Machine().sync_seconds, rel=1e-6)


@pytest.mark.slow
def test_bad_samples_are_refused(probe_graphs):
    with pytest.raises(AutoError, match="at least one measured program"):
        fit_machine([], CostModel())
    with pytest.raises(AutoError, match="measured time of 0.0 s"):
        fit_machine([(probe_graphs[0], 0.0)], CostModel())


def test_figures_are_the_machines_fields_each_fitted_in_one_group():
    # the cache's size is measured (slicer-plan reads it from the system), the overlap a share no probe separates
    assert set(FIGURES) == set(Machine().to_dict()) - {"overlap", "cache_bytes"}
    assert sorted(name for group in SCALED_TOGETHER for name in group) == sorted(FIGURES)
