"""The on-disk kernel cache: hits across processes, misses on any key change, corrupt entries rebuilt."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from slicer.lowering import DEFAULT_PIPELINE, LOOPS_PIPELINE, Target, cache_stats, compile_library, library_key

PROGRAM = """
func.func @axpy(%a: tensor<300xf32>, %x: tensor<300xf32>, %y: tensor<300xf32>) -> tensor<300xf32> {
  %m = arith.mulf %a, %x : tensor<300xf32>
  %s = arith.addf %m, %y : tensor<300xf32>
  return %s : tensor<300xf32>
}
"""

# Runs in a fresh interpreter: compile PROGRAM, check the result, print what happened as JSON.
# With forbid_tools, generating code (in this process or with mlir-translate and llc) or linking (cc) raises.
CHILD = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import slicer.lowering.aot as aot
    from slicer.lowering import cache_stats, compile_library

    if sys.argv[3] == "forbid_tools":
        def forbidden(*args, **kwargs):
            raise AssertionError("a cache hit must not run any tool")
        aot._run_tool = aot._generate_in_process = aot._link = forbidden
    library = compile_library(open(sys.argv[1]).read(), cache_dir=sys.argv[2])
    a, x, y = (np.arange(300, dtype=np.float32) * k for k in (1, 2, 3))
    assert np.array_equal(library["axpy"](a, x, y), a * x + y)
    stats = cache_stats()
    print(json.dumps({"hit": library.cache_hit, "hits": stats.hits, "misses": stats.misses, "tools": aot.TOOL_RUNS}))
    """
)


def run_child(tmp_path: Path, cache: Path, mode: str) -> dict:
    source = tmp_path / "program.mlir"
    source.write_text(PROGRAM)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, str(script), str(source), str(cache), mode], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    first = run_child(tmp_path, cache, "allow_tools")
    assert (
        first["hit"] is False
        and first["misses"] == 1
        and (first["tools"].get("llc") or first["tools"].get("llvm-codegen")) == 1
    )
    second = run_child(tmp_path, cache, "forbid_tools")
    assert second == {"hit": True, "hits": 1, "misses": 0, "tools": {}}


def test_changed_program_pipeline_or_target_is_a_miss(tmp_path):
    base = library_key(PROGRAM, DEFAULT_PIPELINE, Target())
    assert library_key(PROGRAM, DEFAULT_PIPELINE, Target()) == base
    assert library_key(PROGRAM.replace("addf", "subf"), DEFAULT_PIPELINE, Target()) != base
    assert library_key(PROGRAM, LOOPS_PIPELINE, Target()) != base
    assert library_key(PROGRAM, DEFAULT_PIPELINE, Target(cpu="x86-64")) != base

    first = compile_library(PROGRAM, cache_dir=tmp_path)
    assert not first.cache_hit
    assert compile_library(PROGRAM, cache_dir=tmp_path).cache_hit
    changed = compile_library(PROGRAM.replace("addf", "subf"), cache_dir=tmp_path)
    assert not changed.cache_hit and changed.key != first.key
    other_pipeline = compile_library(PROGRAM, cache_dir=tmp_path, pipeline=LOOPS_PIPELINE)
    assert not other_pipeline.cache_hit
    a, x, y = (np.full(300, v, np.float32) for v in (2, 3, 1))
    np.testing.assert_array_equal(changed["axpy"](a, x, y), a * x - y)
    np.testing.assert_array_equal(other_pipeline["axpy"](a, x, y), a * x + y)


def test_corrupt_entries_are_rebuilt_not_trusted(tmp_path):
    library = compile_library(PROGRAM, cache_dir=tmp_path)
    entry = library.path.parent
    a, x, y = (np.full(300, v, np.float32) for v in (2, 3, 1))
    def replace_library(data: bytes) -> None:
        # A new file, not a write into the loaded one (truncating a mapped library kills any process).
        (entry / "garbage").write_bytes(data)
        os.replace(entry / "garbage", entry / json.loads((entry / "meta.json").read_text())["library"])

    for corrupt in (
        lambda: replace_library(b"\x7fELF garbage"),
        lambda: (entry / "meta.json").write_text("{not json"),
        lambda: (entry / json.loads((entry / "meta.json").read_text())["library"]).unlink(),
        lambda: (entry / "meta.json").write_text(json.dumps({"key": "someone else", "format": 1})),
    ):
        corrupt()
        before = cache_stats()
        rebuilt = compile_library(PROGRAM, cache_dir=tmp_path)
        after = cache_stats()
        assert not rebuilt.cache_hit
        assert after.rebuilt_corrupt == before.rebuilt_corrupt + 1
        assert after.misses == before.misses + 1
        np.testing.assert_array_equal(rebuilt["axpy"](a, x, y), a * x + y)
    assert compile_library(PROGRAM, cache_dir=tmp_path).cache_hit


def test_cache_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SLICER_CACHE_DIR", str(tmp_path / "from-env"))
    library = compile_library(PROGRAM)
    assert library.path.is_relative_to(tmp_path / "from-env")
    assert not [p for p in os.listdir(tmp_path / "from-env") if p.startswith(".")], "no staging directory left behind"


@pytest.mark.slow
def test_concurrent_processes_compile_once(tmp_path):
    """Ranks starting together on one machine: the per-key lock lets one build, the others hit."""
    cache = tmp_path / "cache"
    source = tmp_path / "program.mlir"
    source.write_text(PROGRAM)
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    children = [
        subprocess.Popen([sys.executable, str(script), str(source), str(cache), "allow_tools"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    reports = []
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["misses"] for r in reports) == [0, 0, 1]
    assert sum(r["tools"].get("llc", 0) + r["tools"].get("llvm-codegen", 0) for r in reports) == 1


def test_pipelines_are_data(tmp_path):
    from slicer.core.errors import PipelineError
    from slicer.lowering import KernelError, KernelPipeline

    assert DEFAULT_PIPELINE.names() == ["slicer", "linalg", "bufferize", "vectorize", "llvm"]
    assert "vectorize" not in LOOPS_PIPELINE.names() and "slicer-kernel-vectorize" not in LOOPS_PIPELINE.text()
    assert DEFAULT_PIPELINE.until("bufferize").names() == ["slicer", "linalg", "bufferize"]
    with pytest.raises(PipelineError, match="no stage"):
        DEFAULT_PIPELINE.without("tiling")
    bad = KernelPipeline(tuple((n, ("slicer-kernel-vectorize{tiles=3}",) if n == "vectorize" else e) for n,
                               e in DEFAULT_PIPELINE.stages))
    with pytest.raises(KernelError, match="pass .slicer-kernel-vectorize. has no option .tiles."):
        compile_library(PROGRAM, cache_dir=tmp_path, pipeline=bad)


TWO_BLOCKS = """
func.func @kernel_0(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {
  %s = arith.addf %a, %b : tensor<64xf32>
  %m = arith.mulf %s, %a : tensor<64xf32>
  return %m : tensor<64xf32>
}
func.func @kernel_1(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {
  %s = arith.addf %a, %b : tensor<64xf32>
  %m = arith.mulf %s, %a : tensor<64xf32>
  return %m : tensor<64xf32>
}
func.func @kernel_2(%a: tensor<64xf32>) -> tensor<64xf32> {
  %n = arith.negf %a : tensor<64xf32>
  return %n : tensor<64xf32>
}
"""


def test_identical_kernels_compile_once_and_each_kernel_is_cached_alone(tmp_path):
    """compile_kernels: a kernel repeated under another name (a repeated block) is one cache entry; a changed
    kernel recompiles alone."""
    from slicer.lowering import compile_kernels

    before = cache_stats()
    kernels = compile_kernels(TWO_BLOCKS, cache_dir=tmp_path)
    after = cache_stats()
    assert after.misses - before.misses == 2  # kernel_0 and kernel_1 are one entry
    a, b = np.arange(64, dtype=np.float32), np.ones(64, dtype=np.float32)
    for name in ("kernel_0", "kernel_1"):
        np.testing.assert_array_equal(kernels[name](a, b), (a + b) * a)
    np.testing.assert_array_equal(kernels["kernel_2"](a), -a)
    changed = TWO_BLOCKS.replace("arith.negf %a", "arith.addf %a, %a")
    compile_kernels(changed, cache_dir=tmp_path)
    final = cache_stats()
    assert final.misses - after.misses == 1 and final.hits - after.hits == 1
