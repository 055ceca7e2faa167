"""The runtime's cost per array a kernel takes or returns (`Machine.array_seconds`): the compiled price charges
each kernel node's inputs and outputs, so an optimizer of many small parameters costs its arrays, not only its
bytes; the search's model leaves it out (see `Machine.array_seconds`)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest

import slicer
from slicer.automatic import Evaluator, read_sketch
from slicer.automatic.graph_cost import price_graph
from slicer.automatic.machine import Machine
from slicer.lowering.kernel_graph import CollectiveNode
from slicer.redistribution.costs import CostModel
from slicer.tools.machine_probes import _adam

PARAMETERS = 12


@pytest.fixture(scope="module")
def many():
    probe = _adam("many", 2, 128, count=PARAMETERS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = slicer.compile(probe.text, mesh=slicer.Mesh({"x": 1}), tactics=[])
    return probe, program


def test_the_compiled_price_charges_every_array_a_kernel_takes_and_returns(many):
    probe, program = many
    comm, base = CostModel(), Machine()
    dear = replace(base, array_seconds=base.array_seconds + 1e-3)
    graph = program.graph
    arrays = sum(len(n.inputs) + len(n.outputs) for n in graph.nodes if not isinstance(n, CollectiveNode))
    assert arrays >= 7 * PARAMETERS  # four arguments and three results per parameter, at least
    assert price_graph(graph, dear, comm).compute - price_graph(graph, base, comm).compute == \
        pytest.approx(arrays * 1e-3)
    sketch = read_sketch(probe.text)
    tilings = tuple(((), ()) for _ in probe.shapes)

    def model(machine):
        return Evaluator(sketch, slicer.Mesh({"x": 1}), comm=comm, machine=machine).evaluate(tilings).compute

    assert model(dear) == model(base)
