"""The one pass registry (`slicer.core.passes.PASSES`): every registered pass has its lit test, the kernel
pipeline's Slicer steps are registered passes built from their typed options, and bad options are
`OptionError`s naming the pass, the option and what it takes."""

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import slicer.passes as pass_layer
from slicer.core.errors import OptionError, PipelineError
from slicer.core.passes import PASSES, ModulePass, PassTable, module_of, register_pass
from slicer.core.pipeline import instantiate, parse_element
from slicer.lowering import DEFAULT_PIPELINE
from slicer.lowering import passes as lowering_passes
from slicer.lowering.jit import JIT_PIPELINE
from slicer.lowering.passes import LOWERING_PASSES
from slicer.passes import PASSES as TABLE

TRANSFORMS = Path(__file__).resolve().parents[2] / "Transforms"
RUN_LINE = re.compile(r"^// RUN: (.*)$", re.MULTILINE)


def test_the_table_names_every_pass_module_and_each_registers_its_pass():
    """`slicer.passes.PASSES` imports a pass's module when it is looked up: every module of the two pass
    packages is in it (else slicer-opt would not find the pass) and registers the pass it is named after."""
    modules = {f"{package.__name__}.{info.name}" for package in (pass_layer, lowering_passes)
               for info in pkgutil.iter_modules(package.__path__)}
    assert modules == set(TABLE.modules.values())
    for module in sorted(modules):
        importlib.import_module(module)
    assert set(TABLE) == set(PASSES), "a registered pass missing from slicer.passes.PASSES, or one not registered"
    for name in TABLE:
        assert TABLE[name].name == name and TABLE.modules[name].endswith("." + module_of(name))


def test_a_table_imports_a_pass_module_only_when_looked_up():
    table = PassTable("slicer.lowering.passes", ["slicer-kernel-rows"])
    assert "slicer-kernel-rows" in table and "slicer-propagate" not in table and len(table) == 1
    assert table["slicer-kernel-rows"].__name__ == "SlicerKernelRows"
    with pytest.raises(KeyError):
        table["slicer-propagate"]
    with pytest.raises(PipelineError, match="registers no pass 'slicer-kernel-nothing'"):
        PassTable(modules={"slicer-kernel-nothing": "slicer.core.names"})["slicer-kernel-nothing"]


def test_every_registered_pass_has_a_lit_test_that_runs_it():
    assert {"slicer-verify", "slicer-kernel-rows", "slicer-kernel-contract"} <= set(TABLE)
    problems = []
    for name in sorted(TABLE):
        test = TRANSFORMS / f"{name}.mlir"
        if not test.is_file():
            problems.append(f"{name}: no lit test {test.relative_to(TRANSFORMS.parent.parent)}")
        elif not any(re.search(rf"(^|[\s,'(]){re.escape(name)}([\s,'{{)]|$)", run) for run in
                     RUN_LINE.findall(test.read_text())):
            problems.append(f"{name}: {test.name} has no RUN line running the pass")
    assert not problems, "registered passes without a lit test:\n" + "\n".join(problems)


def test_the_kernel_pipelines_slicer_steps_are_registered_passes_with_valid_options():
    steps = [parse_element(e) for pipeline in (DEFAULT_PIPELINE, JIT_PIPELINE)
             for _, elements in pipeline.stages for e in elements if e.startswith("slicer-")]
    assert {s.name for s in steps} >= {"slicer-kernel-contract", "slicer-kernel-rows", "slicer-kernel-vectorize",
                                       "slicer-kernel-widen-i1", "slicer-lower-to-loops"}
    for step in steps:
        assert step.name in LOWERING_PASSES, f"kernel step '{step.name}' is not a lowering pass"
        built = instantiate(step, LOWERING_PASSES)
        # The text it was built from is the text it prints (defaults omitted): the cache key is stable.
        assert parse_element(built.pipeline_text()).name == step.name
        assert instantiate(parse_element(built.pipeline_text()), LOWERING_PASSES) == built


def test_options_are_typed_by_the_fields():
    rows = TABLE["slicer-kernel-rows"].from_options({"unroll": "2"})
    assert rows.unroll == 2 and rows.pipeline_text() == "slicer-kernel-rows{unroll=2}"
    vectorize = TABLE["slicer-kernel-vectorize"].from_options({"matmul": "4,16,8", "kc": "0x40"})
    assert vectorize.matmul == (4, 16, 8) and vectorize.kc == 64
    propagate = TABLE["slicer-propagate"].from_options({"strict-conflicts": ""})
    assert propagate.strict_conflicts is True


@pytest.mark.parametrize("name, options, message", [
    ("slicer-kernel-rows", {"unroll": "two"},
     "pass 'slicer-kernel-rows' option 'unroll' expects an integer, got 'two'"),
    ("slicer-kernel-rows", {"tile": "2"}, "pass 'slicer-kernel-rows' has no option 'tile' (options: unroll)"),
    ("slicer-kernel-vectorize", {"matmul": "4,16"},
     "pass 'slicer-kernel-vectorize' option 'matmul' takes 3 comma-separated values, got '4,16'"),
    ("slicer-kernel-vectorize", {"matmul": "4,x,8"},
     "pass 'slicer-kernel-vectorize' option 'matmul' expects an integer"),
    ("slicer-propagate", {"strict-conflicts": "maybe"}, "option 'strict-conflicts' expects a bool"),
])
def test_bad_options_are_option_errors(name, options, message):
    with pytest.raises(OptionError) as caught:
        TABLE[name].from_options(options)
    assert message in str(caught.value)
    assert isinstance(caught.value, PipelineError)  # a documented SlicerError, reported by slicer-opt


def test_a_second_pass_under_a_registered_name_is_refused():
    assert TABLE["slicer-kernel-rows"].__name__ == "SlicerKernelRows"  # imported, hence registered

    class Impostor(ModulePass):
        name = "slicer-kernel-rows"

        def apply(self, module) -> None:
            pass

    with pytest.raises(PipelineError, match="two passes named 'slicer-kernel-rows'"):
        register_pass(Impostor)
    assert TABLE["slicer-kernel-rows"].__name__ == "SlicerKernelRows"
