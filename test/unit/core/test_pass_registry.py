"""The one pass registry (`slicer.core.passes.PASSES`): every registered pass has its lit test, the kernel
pipeline's Slicer steps are registered passes built from their typed options, and bad options are
`OptionError`s naming the pass, the option and what it takes."""

import re
from pathlib import Path

import pytest

from slicer.core.errors import OptionError, PipelineError
from slicer.core.passes import PASSES, ModulePass, register_pass
from slicer.core.pipeline import instantiate, parse_element
from slicer.lowering import DEFAULT_PIPELINE
from slicer.lowering.jit import JIT_PIPELINE
from slicer.passes import PASS_CLASSES

TRANSFORMS = Path(__file__).resolve().parents[2] / "Transforms"
RUN_LINE = re.compile(r"^// RUN: (.*)$", re.MULTILINE)


def test_every_registered_pass_has_a_lit_test_that_runs_it():
    assert {"slicer-verify", "slicer-kernel-rows", "slicer-kernel-contract"} <= set(PASSES)
    assert set(PASSES) == {cls.name for cls in PASS_CLASSES}
    problems = []
    for name in sorted(PASSES):
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
        assert step.name in PASSES, f"kernel step '{step.name}' is not a registered pass"
        built = instantiate(step)
        # The text it was built from is the text it prints (defaults omitted): the cache key is stable.
        assert parse_element(built.pipeline_text()).name == step.name
        assert instantiate(parse_element(built.pipeline_text())) == built


def test_options_are_typed_by_the_fields():
    rows = PASSES["slicer-kernel-rows"].from_options({"unroll": "2"})
    assert rows.unroll == 2 and rows.pipeline_text() == "slicer-kernel-rows{unroll=2}"
    vectorize = PASSES["slicer-kernel-vectorize"].from_options({"matmul": "4,16,8", "kc": "0x40"})
    assert vectorize.matmul == (4, 16, 8) and vectorize.kc == 64
    propagate = PASSES["slicer-propagate"].from_options({"strict-conflicts": ""})
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
        PASSES[name].from_options(options)
    assert message in str(caught.value)
    assert isinstance(caught.value, PipelineError)  # a documented SlicerError, reported by slicer-opt


def test_a_second_pass_under_a_registered_name_is_refused():
    class Impostor(ModulePass):
        name = "slicer-kernel-rows"

        def apply(self, module) -> None:
            pass

    with pytest.raises(PipelineError, match="two passes named 'slicer-kernel-rows'"):
        register_pass(Impostor)
    assert PASSES["slicer-kernel-rows"].__name__ == "SlicerKernelRows"
