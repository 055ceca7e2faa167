"""slicer-opt behaviour that lit cannot easily show: reproducers, diagnostics checking, IR dumps."""

import re
import shlex
import subprocess
import sys

import pytest

SLICER_OPT = [sys.executable, "-m", "slicer.tools.slicer_opt"]

UNLOWERABLE = """
"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 2>} : () -> ()
func.func @f(%a: tensor<8xf32>, %r: !slicer.range<"x", 2>) -> tensor<4xf32> {
  %b = "slicer.slice"(%a, %r) {dim = 0 : i64} : (tensor<8xf32>, !slicer.range<"x", 2>) -> tensor<4xf32>
  return %b : tensor<4xf32>
}
"""


def run(args, stdin="", cwd=None):
    return subprocess.run(SLICER_OPT + args, input=stdin, capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_pipeline_failure_prints_located_error_and_reproducer(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text(UNLOWERABLE)
    result = run([str(src), "--pass-pipeline=builtin.module(canonicalize,slicer-lower-to-loops)"])
    assert result.returncode == 1
    assert re.search(r"in\.mlir:4:8: error: 'slicer.slice' whose range is not the argument", result.stderr)
    command = re.search(r"reproduce with: (slicer-opt .*)", result.stderr).group(1)
    # The printed command reproduces the failure.
    repro = subprocess.run(
        [sys.executable, "-m", "slicer.tools.slicer_opt"] + shlex.split(command)[1:],
        capture_output=True, text=True, timeout=120,
    )
    assert repro.returncode == 1
    assert "'slicer.slice' whose range is not the argument" in repro.stderr


@pytest.mark.slow
def test_verify_diagnostics_fails_on_a_wrong_expectation(tmp_path):
    src = tmp_path / "wrong.mlir"
    src.write_text(
        '"slicer.mesh"() {sym_name = "mesh", axes = ["x"], shape = array<i64: 0>} : () -> ()\n'
        "// expected-error@-1 {{some other message}}\n"
    )
    result = run([str(src), "--verify-diagnostics"])
    assert result.returncode == 1
    assert "unexpected error at line 1" in result.stderr
    assert "expected error at line 1 was not produced" in result.stderr


@pytest.mark.slow
def test_verify_diagnostics_fails_when_nothing_is_reported(tmp_path):
    src = tmp_path / "quiet.mlir"
    src.write_text("// expected-error@+1 {{boom}}\nfunc.func @f() { return }\n")
    assert run([str(src), "-verify-diagnostics"]).returncode == 1


@pytest.mark.slow
def test_print_ir_after_all_shows_each_pass():
    result = run(["-p", "slicer-verify,canonicalize", "--mlir-print-ir-after-all"], stdin="func.func @f() { return }")
    assert result.returncode == 0
    assert "IR Dump After SlicerVerify (slicer-verify)" in result.stderr
    assert "IR Dump After Canonicalizer (canonicalize)" in result.stderr


@pytest.mark.slow
def test_output_file_and_split_join(tmp_path):
    out = tmp_path / "out.mlir"
    text = "func.func @a() { return }\n// -----\nfunc.func @b() { return }\n"
    assert run(["-split-input-file", "-o", str(out)], stdin=text).returncode == 0
    assert out.read_text().count("// -----") == 1


WIDEN_I1 = """
func.func @f(%a: tensor<8xi1>) -> tensor<8xi1> {
  return %a : tensor<8xi1>
}
"""
LOADED = ("import sys, io, contextlib\nfrom slicer.tools import slicer_opt\n"
          "with contextlib.redirect_stdout(io.StringIO()):\n"
          "    status = slicer_opt.main(sys.argv[1:])\n"
          "print(status, *sorted(m for m in sys.modules if m.startswith('slicer.')))")


def test_a_run_loads_only_the_passes_its_pipeline_names(tmp_path):
    """slicer-opt's start-up is most of a lit test's time: one kernel step loads that step, not the
    partitioner, the search or the other passes; the report's modules only with --print-collectives."""
    src = tmp_path / "in.mlir"
    src.write_text(WIDEN_I1)
    result = subprocess.run([sys.executable, "-c", LOADED, str(src), "-p", "slicer-kernel-widen-i1"],
                            capture_output=True, text=True, timeout=120)
    status, *loaded = result.stdout.split()
    assert status == "0", result.stderr
    assert "slicer.lowering.passes.kernel_widen_i1" in loaded
    unwanted = [m for m in loaded if m.startswith(("slicer.spmd", "slicer.automatic", "slicer.propagation",
                                                   "slicer.tools.print_collectives", "slicer.lowering.kernel_graph"))
                or (m.startswith(("slicer.passes.", "slicer.lowering.passes.")) and not m.endswith("widen_i1"))]
    assert not unwanted, f"slicer-opt -p slicer-kernel-widen-i1 loaded {unwanted}"
