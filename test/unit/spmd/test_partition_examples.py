"""The hand-written loop programs (examples/*_loops.mlir and the lit inputs) partitioned, simulated and
round-tripped through plain `mlir-opt`.

Each partitioned program must equal its loop program on random data for every device, contain exactly the
collectives its partition calls for, and parse with the real `mlir-opt` (with `--irdl-file` only when a
`slicer.permute` remains).
"""

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from slicer.core.toolchain import find_tool
from slicer.dialect import IRDL_PATH
from slicer.passes import transform
from slicer.runtime.simulation.oracle import compare

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*_loops.mlir"))
LIT = ROOT / "test" / "Transforms" / "slicer-partition.mlir"

# example -> the collectives its partition must contain (op name -> count)
EXPECTED = {
    "megatron_mlp_loops": {"shard.all_reduce": 1},
    "data_parallel_mlp_loops": {},
    "mlp_2d_loops": {"shard.all_reduce": 1},
    "attention_heads_loops": {"shard.all_reduce": 1},
}
COLLECTIVE = re.compile(r"(shard\.(?:all_gather|all_to_all|all_reduce|reduce_scatter|all_slice)|slicer\.permute)\b")


def partition(module, pipeline: str = "slicer-partition", **options) -> str:
    """`pipeline` (default: slicer-partition) on a copy of `module`; the result's text."""
    return transform(module, pipeline, **options)


def collectives(text: str) -> dict:
    found = {}
    for name in COLLECTIVE.findall(text):
        found[name] = found.get(name, 0) + 1
    return found


def lit_cases() -> list[str]:
    return [c for c in LIT.read_text().split("// -----") if "func.func" in c]


def round_trip(text: str) -> str:
    mlir_opt = find_tool("mlir-opt")
    args = [str(mlir_opt)] + ([f"--irdl-file={IRDL_PATH}"] if "slicer." in _ops_only(text) else [])
    done = subprocess.run(args, input=text, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _ops_only(text: str) -> str:
    """The text without attribute names such as `slicer.dist` (only ops need the IRDL file)."""
    return re.sub(r"slicer\.(dist_source|dist|spmd_mesh|axes)\b", "", text)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_partition(path):
    spmd = partition(path.read_text())
    assert collectives(spmd) == EXPECTED[path.stem]
    result = compare(path.read_text(), spmd)
    for e, a in zip(result.expected, result.actual):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    if path.stem == "data_parallel_mlp_loops":
        assert result.exact
    # plain upstream MLIR: no --irdl-file needed
    assert "slicer." not in _ops_only(spmd)
    assert "shard.grid @mesh" in round_trip(spmd)


@pytest.mark.parametrize("index", range(len(lit_cases())))
def test_lit_inputs_partition_and_run(index):
    case = lit_cases()[index]
    spmd = partition(case)
    result = compare(case, spmd)
    for e, a in zip(result.expected, result.actual):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5)
    round_trip(spmd)
