"""A kernel build that exceeds its time limit stops with a clear error naming the largest kernel and its largest
op (never a hang); a limit that is not a number is refused."""

import pytest

from slicer.core.errors import BudgetExceeded, KernelError
from slicer.lowering import compile_library
from slicer.lowering.aot import describe_largest

PROGRAM = """
func.func @small(%a: tensor<4xf32>) -> tensor<4xf32> {
  %s = arith.addf %a, %a : tensor<4xf32>
  return %s : tensor<4xf32>
}
func.func @big(%a: tensor<64x64xf32>, %b: tensor<64x64xf32>) -> tensor<64x64xf32> {
  %m = arith.mulf %a, %b : tensor<64x64xf32>
  %s = arith.addf %m, %a : tensor<64x64xf32>
  %t = arith.subf %s, %b : tensor<64x64xf32>
  return %t : tensor<64x64xf32>
}
"""


def test_a_build_over_its_time_limit_names_the_largest_kernel(monkeypatch, tmp_path):
    monkeypatch.setenv("SLICER_KERNEL_COMPILE_SECONDS", "0.001")
    with pytest.raises(BudgetExceeded) as caught:
        compile_library(PROGRAM, cache_dir=tmp_path)
    message = str(caught.value)
    assert "did not finish within 0.001 s" in message and "SLICER_KERNEL_COMPILE_SECONDS" in message
    assert "@big" in message and "4,096 result elements" in message
    monkeypatch.delenv("SLICER_KERNEL_COMPILE_SECONDS")
    library = compile_library(PROGRAM, cache_dir=tmp_path)  # the failed build left nothing behind
    assert not library.cache_hit


def test_describe_largest_counts_nested_ops():
    assert describe_largest(PROGRAM).startswith("the largest of its 2 kernels is @big (4 ops; its largest op is")


def test_a_limit_that_is_not_a_number_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("SLICER_KERNEL_COMPILE_SECONDS", "ten")
    with pytest.raises(KernelError, match="is not a number of seconds"):
        compile_library(PROGRAM, cache_dir=tmp_path)
