"""Compiling is deterministic across processes: the same program, mesh and tactics give the same plans and
the same SPMD program in two fresh interpreters with different string-hash seeds (set and dict orders of
strings differ between them, so an order that depends on hashing shows up here, not in one process)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

SCRIPT = f"""
import slicer
from slicer.redistribution import DistType, Mesh, plan
m = Mesh(x=2, y=2, z=2)
for src, dst in [("[[x,y],[z],[]]", "[[z],[],[y,x]]"), ("[[x],[y],[z]] partial=[]", "[[],[z,x],[y]]")]:
    print(plan(m, DistType.parse(src, (16, 16, 16), m), DistType.parse(dst, (16, 16, 16), m)).to_json())
for name, mesh, tactics in [("mha", dict(x=2, y=2), "arg0.0=x;arg1.1=y;arg2.1=y;arg3.1=y;arg4.0=y"),
                            ("mlp", dict(x=2, y=4), "arg0.0=x;arg1.1=y;arg3.0=y")]:
    text = open({str(EXAMPLES)!r} + "/" + name + ".mlir").read()
    print(slicer.compile(text, mesh=slicer.Mesh(**mesh), tactics=slicer.parse_tactics(tactics)).spmd)
"""


def run_with_hash_seed(seed: str) -> str:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONHASHSEED=seed))
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.slow
def test_plans_and_spmd_programs_are_the_same_in_two_processes():
    first, second = run_with_hash_seed("1"), run_with_hash_seed("2")
    assert "shard.all_reduce" in first and '"steps"' in first
    assert first == second
