"""Every strategy of examples/strategies (data, Megatron, sequence parallel, FSDP, and their compositions, on
MLPs, attention and a transformer block) runs on 4 MPI ranks (a 2x2 mesh, and a 1-D mesh of 4 for the
one-axis strategies) and equals an independent numpy evaluation of the program. Their collectives are pinned
by test/Strategies/collectives.mlir."""

import numpy as np
import pytest

import slicer
from example_modules import load

strategies = load("strategies/strategies.py", "strategies")

CASES = [(name, strategy, tactics, mesh)
         for name, table in strategies.STRATEGIES.items()
         for strategy, (tactics, axes) in table.items()
         for mesh in strategies.meshes(axes)]


@pytest.mark.parametrize("name, strategy, tactics, mesh", CASES,
                         ids=[f"{c[0]}-{c[1]}-{'x'.join(f'{a}{n}' for a, n in c[3].items())}" for c in CASES])
def test_strategy_on_mpi_ranks_equals_numpy(name, strategy, tactics, mesh):
    prog = slicer.compile(strategies.program_path(name).read_text(), mesh=slicer.Mesh(**mesh),
                          tactics=slicer.parse_tactics(tactics))
    arrays = strategies.inputs_for(prog, seed=len(name) + len(strategy))
    got = prog.run(*arrays, ranks=prog.mesh.device_count, timeout=300)
    np.testing.assert_allclose(got, strategies.reference(name, arrays), rtol=2e-5, atol=2e-5)


def test_parameters_are_divided_by_the_axes_that_shard_them():
    """Per-device parameter memory: Megatron divides by |y|, FSDP by |x|, both compose."""
    text = strategies.program_path("mlp").read_text()
    table = strategies.STRATEGIES["mlp"]
    sizes = {}
    for strategy in ("data", "megatron", "fsdp", "data+megatron+fsdp"):
        prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=2), tactics=slicer.parse_tactics(table[strategy][0]))
        sizes[strategy], whole = strategies.parameter_bytes(prog)
    assert sizes["data"] == whole == 4 * (16 * 32 + 32 + 32 * 16)
    assert sizes["megatron"] == sizes["fsdp"] == whole // 2
    assert sizes["data+megatron+fsdp"] == 4 * (16 * 32 // 4 + 32 // 2 + 32 * 16 // 4)
