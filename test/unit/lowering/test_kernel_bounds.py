"""Compiled kernels read no byte outside their operands.

Each input is placed so that its last byte is the last one before a page with no access (`mprotect`), then so that
its first byte follows such a page: a kernel loading past either edge faults. Reading past an operand computes the
right answer where the extra lanes are thrown away, so only this catches it, and only sometimes the machine: the
contraction kernels' packing loaded whole panels of a narrower tile (a 3-class linear layer's weight read as 32 rows),
which crashed one rank of the fuzzer's convnet training step where the heap ended after the weight.

The kernels run in a child process: a fault there is a failed test naming the case, not a lost pytest worker."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

CONTRACTION = """
func.func @{name}(%x: tensor<{m}x{k}xf32>, %w: tensor<{wshape}xf32>) -> tensor<{m}x{n}xf32> {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %y = linalg.generic {{indexing_maps = [affine_map<(i, j, k) -> (i, k)>, affine_map<(i, j, k) -> ({b})>,
                                      affine_map<(i, j, k) -> (i, j)>],
                       iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%x, %w : tensor<{m}x{k}xf32>, tensor<{wshape}xf32>) outs(%f : tensor<{m}x{n}xf32>) {{
  ^bb0(%u: f32, %v: f32, %acc: f32):
    %p = arith.mulf %u, %v : f32
    %s = arith.addf %acc, %p : f32
    linalg.yield %s : f32
  }} -> tensor<{m}x{n}xf32>
  return %y : tensor<{m}x{n}xf32>
}}
"""

ROWS = """
func.func @{name}(%x: tensor<{m}x{n}xf32>, %y: tensor<{m}x{n}xf32>) -> (tensor<{m}x{n}xf32>, tensor<{m}xf32>) {{
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %t = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>,
                                      affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}}
      ins(%x, %y : tensor<{m}x{n}xf32>, tensor<{m}x{n}xf32>) outs(%e : tensor<{m}x{n}xf32>) {{
  ^bb0(%u: f32, %v: f32, %o: f32):
    %h = math.tanh %u : f32
    %p = arith.mulf %h, %v : f32
    linalg.yield %p : f32
  }} -> tensor<{m}x{n}xf32>
  %er = tensor.empty() : tensor<{m}xf32>
  %fr = linalg.fill ins(%zero : f32) outs(%er : tensor<{m}xf32>) -> tensor<{m}xf32>
  %s = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}}
      ins(%t : tensor<{m}x{n}xf32>) outs(%fr : tensor<{m}xf32>) {{
  ^bb0(%u: f32, %acc: f32):
    %a = arith.addf %acc, %u : f32
    linalg.yield %a : f32
  }} -> tensor<{m}xf32>
  return %t, %s : tensor<{m}x{n}xf32>, tensor<{m}xf32>
}}
"""

# (m, n, k): edge tiles on each side (the register tile is 8 x 32 in f32), panels narrower than the tile (of 3, 5, 16
# and 1 rows), exact tiles
CONTRACTIONS = [(1, 3, 288), (4, 3, 288), (8, 5, 64), (16, 16, 16), (9, 48, 40), (17, 33, 5), (3, 257, 7), (64, 64, 64)]
ROW_SHAPES = [(3, 37), (5, 45), (7, 13), (1, 16)]

CHILD = textwrap.dedent('''
    import sys
    import numpy as np
    from fuzz.guarded import guarded_copy  # (the fuzzer's AOT stage guards every kernel's inputs the same way)
    from slicer.lowering import compile_library

    KEEP = []

    library = compile_library(sys.stdin.read(), cache_dir=sys.argv[1])
    rng = np.random.default_rng(0)
    for name in sys.argv[2:]:
        kernel = library[name]
        inputs = [rng.standard_normal(spec.shape).astype(np.float32) for spec in kernel.inputs]
        want = kernel(*inputs)
        for at_end in (True, False):
            print(name, "guard", "after" if at_end else "before", flush=True)
            got = kernel(*[guarded_copy(a, at_end, KEEP) for a in inputs])
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    print("done", flush=True)
''')


def _programs() -> tuple[str, list[str]]:
    texts, names = [], []
    for m, n, k in CONTRACTIONS:
        for layout, b, wshape in (("nk", "j, k", f"{n}x{k}"), ("kn", "k, j", f"{k}x{n}")):
            name = f"contract_{layout}_{m}_{n}_{k}"
            texts.append(CONTRACTION.format(name=name, m=m, n=n, k=k, b=b, wshape=wshape))
            names.append(name)
    for m, n in ROW_SHAPES:
        name = f"rows_{m}_{n}"
        texts.append(ROWS.format(name=name, m=m, n=n))
        names.append(name)
    return "\n".join(texts), names


@pytest.mark.slow
def test_kernels_read_nothing_outside_their_operands(cache_dir):
    text, names = _programs()
    done = subprocess.run([sys.executable, "-c", CHILD, str(cache_dir), *names], input=text, capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).resolve().parents[2])  # test/: the fuzz package
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[-1:] == ["done"], (
        f"the kernels faulted or failed (exit {done.returncode}) at: {lines[-1] if lines else 'the start'}\n"
        f"{done.stderr[-2000:]}")
