"""The progress line (slicer.core.progress) appears on terminals only, and compiling kernels draws it."""

import io

import pytest

from slicer.core.environment import PROGRESS
from slicer.core.progress import Progress
from slicer.lowering import compile_library, llvm_codegen

PROGRESS_ENV = PROGRESS.name


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch):
    monkeypatch.delenv(PROGRESS_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)


def test_drawn_in_place_on_a_terminal_and_erased_at_the_end():
    out = Terminal()
    with Progress("compiling 3 kernels", total=2, stream=out) as progress:
        progress.step("pipeline")
        progress.step("llc")
    text = out.getvalue()
    assert "\r\x1b[Kcompiling 3 kernels [1/2] pipeline (" in text
    assert "\r\x1b[Kcompiling 3 kernels [2/2] llc (" in text
    assert text.endswith("\r\x1b[K") and "\n" not in text


@pytest.mark.parametrize("stream,env,drawn", [
    (io.StringIO(), {}, False),                  # a pipe or a file
    (Terminal(), {"CI": "true"}, False),         # CI logs
    (Terminal(), {PROGRESS_ENV: "0"}, False),
    (io.StringIO(), {PROGRESS_ENV: "1"}, True),
])
def test_only_on_terminals(stream, env, drawn, monkeypatch):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with Progress("work", total=1, stream=stream) as progress:
        progress.step("one")
    assert bool(stream.getvalue()) == drawn


@pytest.mark.parametrize("codegen", ["in-process", "tools"])
def test_compiling_a_kernel_library_shows_its_stages(tmp_path, monkeypatch, codegen):
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    monkeypatch.setenv(llvm_codegen.CODEGEN_ENV, codegen)
    module = """
    func.func @double(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = arith.addf %a, %a : tensor<4xf32>
      return %0 : tensor<4xf32>
    }"""
    compile_library(module, cache_dir=tmp_path)
    text = terminal.getvalue()
    # In this process when it can generate code (llvm_codegen.available), else with the tools.
    middle = (("translate to LLVM IR", "code generation (as llc -O3)") if llvm_codegen.available() else
              ("mlir-translate", "llc -O3"))
    stages = ("kernel pipeline", *middle, "link")
    for index, stage in enumerate(stages, start=1):
        assert f"compiling 1 kernel [{index}/4] {stage}" in text
    assert text.endswith("\r\x1b[K")
