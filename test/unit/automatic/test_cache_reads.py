"""Reads from memory and from the cache (`slicer.automatic.cache_reads`): a value last touched more than a cache's
worth of bytes ago is read at the memory's bandwidth, by the search's model and the compiled programs' price alike;
and the cache's share of a rank, read from the system for `slicer-plan --calibrate kernels`."""

from __future__ import annotations

import warnings
from dataclasses import replace

import pytest

import slicer
from slicer.automatic import Evaluator, read_sketch
from slicer.automatic.cache_reads import CacheClock
from slicer.automatic.graph_cost import price_graph
from slicer.automatic.machine import Machine
from slicer.redistribution.costs import CostModel
from slicer.tools.machine_probes import cache_share

MIB = 1 << 20


def test_a_value_is_cold_once_a_cache_worth_of_other_bytes_went_by():
    clock = CacheClock(capacity=4 * MIB, argument_bytes=3 * MIB)
    assert clock.read(["w"], [MIB]) == 0  # an argument, in a program of 3 MiB: still cached from the last run
    clock.made("a", 2 * MIB)
    assert clock.read(["a", "w"], [2 * MIB, MIB]) == 0
    clock.made("b", 3 * MIB)
    clock.made("c", 2 * MIB)
    assert clock.read(["a"], [2 * MIB]) == 2 * MIB  # 5 MiB stored since its last touch
    assert clock.read(["a"], [2 * MIB]) == 0  # brought back by that read
    assert clock.read([None, "c"], [8 * MIB, MIB]) == 0  # a copy made for the op; c just made
    clock.share("slice", "c")
    assert clock.read(["slice"], [MIB]) == 0
    fresh = CacheClock(capacity=4 * MIB, argument_bytes=5 * MIB)
    assert fresh.read(["w"], [MIB]) == MIB  # a program past the cache finds its arguments in memory


def test_cold_reads_only_exist_where_the_two_bandwidths_differ():
    assert CacheClock.of(Machine(), 0) is None
    assert CacheClock.of(replace(Machine(), memory_bandwidth=1e10), 0) is not None


ELEMENTWISE = """
#map = affine_map<(i, j) -> (i, j)>
func.func @main(%x: tensor<1024x1024xf32>, %y: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %e = tensor.empty() : tensor<1024x1024xf32>
  %s = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%e : tensor<1024x1024xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.addf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1024x1024xf32>
  %p = linalg.generic {indexing_maps = [#map, #map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%s, %x : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%e : tensor<1024x1024xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %r = arith.mulf %a, %b : f32
    linalg.yield %r : f32
  } -> tensor<1024x1024xf32>
  return %p : tensor<1024x1024xf32>
}
"""


@pytest.fixture(scope="module")
def elementwise():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return slicer.compile(ELEMENTWISE, mesh=slicer.Mesh({"x": 1}), tactics=[])


def test_a_program_past_the_cache_reads_its_arguments_from_memory(elementwise):
    """12 MiB of arguments and results: in a 64 MiB cache every read is warm and the price is the one-bandwidth
    price; in a 4 MiB cache the arguments come from memory at a tenth of the bandwidth, in the model and the
    compiled price alike."""
    one = Machine()
    slow = replace(one, memory_bandwidth=one.bandwidth / 10)
    comm = CostModel()
    sketch = read_sketch(ELEMENTWISE)
    tilings = (((), ()), ((), ()))

    def prices(machine):
        model = Evaluator(sketch, slicer.Mesh({"x": 1}), comm=comm, machine=machine).evaluate(tilings).compute
        return model, price_graph(elementwise.graph, machine, comm).compute

    base = prices(one)
    assert prices(replace(slow, cache_bytes=64 * MIB)) == pytest.approx(base)
    small = prices(replace(slow, cache_bytes=4 * MIB))
    # x and y (4 MiB each) read cold by the first op, and x again by the second (12 MiB went through the cache
    # since: x, y and s): 12 MiB at a tenth of the bandwidth instead of at it; s, just made, stays warm
    extra = 12 * MIB * 9 / one.bandwidth
    assert small[0] == pytest.approx(base[0] + extra, rel=0.05)
    assert small[1] == pytest.approx(base[1] + extra, rel=0.05)


def test_the_cache_share_of_a_rank_is_read_from_sysfs(tmp_path):
    def level(name, number, kind, size, cpus):
        index = tmp_path / "cache" / name
        index.mkdir(parents=True)
        for field, value in (("level", number), ("type", kind), ("size", size), ("shared_cpu_list", cpus)):
            (index / field).write_text(f"{value}\n")

    assert cache_share(2, tmp_path) is None
    level("index0", 1, "Data", "48K", "0")
    level("index1", 1, "Instruction", "32K", "0")
    level("index2", 2, "Unified", "1024K", "0")
    level("index3", 3, "Unified", "32768K", "0-3,8-11")
    assert cache_share(2, tmp_path) == 16 * MIB  # 8 CPUs share it, 2 ranks run
    assert cache_share(16, tmp_path) == 4 * MIB


def test_a_contraction_pays_for_the_bytes_it_reads_from_memory():
    machine = replace(Machine(), memory_bandwidth=1e10)
    warm = machine.op_time(2e9, True, produced=MIB, read=4 * MIB)
    assert warm == pytest.approx(2e9 / machine.contraction_flops + machine.op_seconds)
    assert machine.op_time(2e9, True, produced=MIB, read=4 * MIB, cold=3 * MIB) == pytest.approx(warm + 3 * MIB / 1e10)
