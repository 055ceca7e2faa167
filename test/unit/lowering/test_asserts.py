"""A program's run-time checks (`cf.assert`, as torch-mlir emits for an embedding's indices) fail as
`KernelAssertionError` in the JIT and in compiled kernels, instead of aborting the process; gathers read
within bounds whatever the indices (`lowering/asserts.py`)."""

import numpy as np
import pytest
from mlir import ir

from slicer import KernelAssertionError, RunError
from slicer.core.names import ASSERT_MESSAGES_ATTR
from slicer.dialect import make_context
from slicer.lowering import DEFAULT_PIPELINE, compile_function, compile_library
from slicer.lowering.asserts import STATUS_FUNCTION

# An embedding lookup as torch-mlir writes it: a gather in a generic body, its index checked first.
EMBEDDING = """
func.func @lookup(%ids: tensor<2x3xi64>, %table: tensor<10x4xf32>) -> tensor<2x3x4xf32> {
  %c10 = arith.constant 10 : index
  %c0 = arith.constant 0 : i64
  %e = tensor.empty() : tensor<2x3x4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(b, s, d) -> (b, s)>, affine_map<(b, s, d) -> (b, s, d)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%ids : tensor<2x3xi64>) outs(%e : tensor<2x3x4xf32>) {
  ^bb0(%id: i64, %o: f32):
    %i = arith.index_cast %id : i64 to index
    %d = linalg.index 2 : index
    %small = arith.cmpi slt, %i, %c10 : index
    cf.assert %small, "index must be smaller than dim size"
    %positive = arith.cmpi sge, %id, %c0 : i64
    cf.assert %positive, "index must be larger or equal to 0"
    %v = tensor.extract %table[%i, %d] : tensor<10x4xf32>
    linalg.yield %v : f32
  } -> tensor<2x3x4xf32>
  return %r : tensor<2x3x4xf32>
}
"""

TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)
GOOD = np.array([[0, 9, 3], [4, 4, 1]], np.int64)


def kernels(cache_dir, text=EMBEDDING):
    return {"jit": compile_function(text), "aot": compile_library(text, cache_dir=cache_dir)["lookup"]}


@pytest.mark.parametrize("backend", ["jit", "aot"])
@pytest.mark.parametrize("bad, message", [(1_000_000, "smaller than dim size"), (-3, "larger or equal to 0"),
                                          (10, "smaller than dim size")])
def test_a_failed_check_raises_and_the_next_call_runs(cache_dir, backend, bad, message):
    kernel = kernels(cache_dir)[backend]
    np.testing.assert_array_equal(kernel(GOOD, TABLE), TABLE[GOOD])
    ids = GOOD.copy()
    ids[1, 2] = bad
    with pytest.raises(KernelAssertionError, match=message) as caught:
        kernel(ids, TABLE)
    assert isinstance(caught.value, RunError) and "@lookup" in str(caught.value)
    # the failure was taken: the same kernel on good data runs and is right
    np.testing.assert_array_equal(kernel(GOOD, TABLE), TABLE[GOOD])


def test_bound_calls_check_too(cache_dir):
    kernel = compile_library(EMBEDDING, cache_dir=cache_dir)["lookup"]
    ids = GOOD.copy()
    out = kernel.empty_outputs()[0]
    good = kernel.bind(ids, TABLE, out=out)
    good()
    np.testing.assert_array_equal(out, TABLE[GOOD])
    ids[0, 0] = 77
    with pytest.raises(KernelAssertionError):
        good()


def test_the_pipeline_turns_asserts_into_a_status_function():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(EMBEDDING)
        DEFAULT_PIPELINE.run(module)
        text = str(module)
    assert "cf.assert" not in text and "llvm.call @abort" not in text and "@abort" not in text
    assert f"llvm.func @{STATUS_FUNCTION}()" in text
    assert ASSERT_MESSAGES_ATTR in text  # read and dropped by the callers (aot.py, jit.py)


def test_gathers_without_checks_stay_in_bounds(cache_dir):
    """No assert: an index far out of range reads a clamped element instead of faulting."""
    text = EMBEDDING.replace('cf.assert %small, "index must be smaller than dim size"', "").replace(
        'cf.assert %positive, "index must be larger or equal to 0"', "")
    ids = GOOD.copy()
    ids[0, 1] = 1 << 40
    ids[1, 0] = -(1 << 40)
    assert "cf.assert" not in text
    for kernel in kernels(cache_dir, text).values():
        got = kernel(ids, TABLE)
        np.testing.assert_array_equal(got[0, 1], TABLE[9])
        np.testing.assert_array_equal(got[1, 0], TABLE[0])
        np.testing.assert_array_equal(got[0, 0], TABLE[0])


@pytest.mark.parametrize("backend", ["jit", "aot"])
def test_a_failed_check_carries_what_the_call_wrote(cache_dir, backend):
    """The kernel ran to the end (gathers clamped): a rank finishes its step with these outputs before failing
    it, so the other ranks are not left waiting in a collective (runtime/execution/executor.py)."""
    ids = GOOD.copy()
    ids[0, 1] = 12
    with pytest.raises(KernelAssertionError) as caught:
        kernels(cache_dir)[backend](ids, TABLE)
    assert caught.value.check == "index must be smaller than dim size"
    np.testing.assert_array_equal(caught.value.outputs, TABLE[np.clip(ids, 0, 9)])
