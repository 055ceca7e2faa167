"""`slicer-remat` on the hand-written steps of its lit test (test/Transforms/slicer-remat.mlir): every policy
computes what the step computed before (the JIT, random inputs), each forward op is cloned at most once, the
collectives are saved (never cloned), and a pattern or policy that cannot apply is an InvalidTactic."""

from pathlib import Path

import pytest
from mlir import ir

from slicer.checking import check_equivalent
from slicer.core.errors import InvalidTactic, OptionError
from slicer.core.names import COLLECTIVE_OPS, REMAT_ATTR
from slicer.dialect import make_context, walk_ops
from slicer.passes import run_pipeline
from slicer.spmd.rematerialize import rematerialize, unit_of

LIT = Path(__file__).resolve().parents[2] / "Transforms" / "slicer-remat.mlir"
TWO_BLOCKS, MEGATRON = LIT.read_text().split("// -----")


def rewritten(text: str, pattern="blocks.*", policy="full", names=()):
    with make_context():
        module = ir.Module.parse(text)
        units = rematerialize(module.operation, pattern, policy, names)
        module.operation.verify()
        return str(module), units, [op for op in walk_ops(module.operation) if REMAT_ATTR in op.attributes]


@pytest.mark.parametrize("policy, names, cloned", [
    ("full", (), {"blocks.0": 2, "blocks.1": 2}),
    ("save_dots", (), {"blocks.0": 1, "blocks.1": 1}),
    ("save_names", ("blocks.*.act",), {"blocks.0": 1, "blocks.1": 1}),
    ("none", (), {}),
])
def test_every_policy_computes_the_same_step(policy, names, cloned):
    text, units, clones = rewritten(TWO_BLOCKS, policy=policy, names=names)
    assert {u.name: u.cloned for u in units} == cloned
    assert len(clones) == sum(cloned.values())  # one clone per recomputed op, whatever its readers
    check_equivalent(TWO_BLOCKS, text, step=f"remat {policy}")


def test_a_collective_is_saved_and_the_recomputation_reads_its_result():
    text, units, clones = rewritten(MEGATRON)
    assert [op.name for op in clones] == ["linalg.generic"]
    assert sum(text.count(name) for name in COLLECTIVE_OPS) == 1
    assert units[0].saved and units[0].recomputed


def test_the_units_are_the_outermost_modules_the_pattern_matches():
    assert unit_of("blocks.0.attn.q", "blocks.*") == "blocks.0"
    assert unit_of("blocks.0.attn.q", "blocks.*.attn") == "blocks.0.attn"
    assert unit_of("blocks.0.attn.q", "blocks.*.mlp") is None
    assert unit_of(None, "blocks.*") is None


def test_a_pattern_matching_no_module_names_the_closest():
    with pytest.raises(InvalidTactic, match=r"'blocks\.\*\.attn' matches no module of the forward pass "
                                            r"\(closest: 'blocks"):
        rewritten(TWO_BLOCKS, pattern="blocks.*.attn")


def test_bad_options_are_option_errors():
    with make_context():
        module = ir.Module.parse(TWO_BLOCKS)
        with pytest.raises(OptionError, match="policy' must be one of full, save_dots"):
            run_pipeline(module, "slicer-remat{pattern=blocks.* policy=most}")
        with pytest.raises(OptionError, match="needs pattern="):
            run_pipeline(module, "slicer-remat")
        with pytest.raises(OptionError, match="needs names="):
            run_pipeline(module, "slicer-remat{pattern=blocks.* policy=save_names}")
