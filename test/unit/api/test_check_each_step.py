"""--check-each-step: a step that changes what the program computes is an error naming the step."""

import sys
from pathlib import Path

import pytest
from mlir import ir

import slicer
from slicer.checking import check_equivalent
from slicer.core.errors import StepMismatch
from slicer.dialect import SumAction, make_context
from slicer.propagation import blockwise
from slicer.rules import RuleOutcome

MLP = (Path(__file__).resolve().parents[3] / "examples" / "mlp.mlir").read_text()


def test_check_equivalent_names_the_step():
    negated = MLP.replace("arith.maximumf %v, %zero", "arith.minimumf %v, %zero")
    check_equivalent(MLP, MLP, step="nothing")
    with pytest.raises(StepMismatch, match=r"after my-step: result #0 of @mlp differs"):
        check_equivalent(MLP, negated, step="my-step")


def test_a_wrong_propagation_law_is_caught(monkeypatch):
    # Mutation: every forward rewrite claims to be a sum (wrong for parallel dims).
    monkeypatch.setattr(blockwise, "outcome_kind", lambda outcome: "sum")
    monkeypatch.setattr(RuleOutcome, "action", property(lambda self: SumAction()))
    with make_context():
        module = slicer.apply_tactics(ir.Module.parse(MLP), [slicer.Tile(arg=0, dim=0, axes="x")], mesh={"x": 2})
        with pytest.raises(slicer.CompileError, match="after slicer-propagate: (result #0 of @mlp differs|the program "
                                                      "no longer compiles)"):
            slicer.propagate(module, check_each_step=True)


def test_a_value_changing_step_is_caught():
    # Mutation that keeps the IR valid but changes values: relu becomes min(v, 0) after tactics.
    with make_context():
        module = slicer.apply_tactics(ir.Module.parse(MLP), [slicer.Tile(arg=0, dim=0, axes="x")], mesh={"x": 2})
        wrong = str(module).replace("arith.maximumf", "arith.minimumf")
    with pytest.raises(StepMismatch, match="after propagation: result #0 of @mlp differs"):
        check_equivalent(MLP, wrong, step="propagation")


def test_correct_steps_pass_the_check(monkeypatch):
    # Every step is checked (each tactic, then propagation), each check compares two different programs,
    # and none raises; the program the steps give still computes what the original does.
    checked = []

    def recording(before, after, *, step, **options):
        checked.append((step, before != after))
        return check_equivalent(before, after, step=step, **options)

    # The check's own module (for callers imported later) and every module that has already imported it.
    monkeypatch.setattr(sys.modules[check_equivalent.__module__], "check_equivalent", recording)
    for name, loaded in list(sys.modules.items()):
        if name.startswith("slicer.") and getattr(loaded, "check_equivalent", None) is check_equivalent:
            monkeypatch.setattr(loaded, "check_equivalent", recording)
    with make_context():
        module = slicer.apply_tactics(ir.Module.parse(MLP),
                                      [slicer.Tile(arg=1, dim=1, axes="y"), slicer.Tile(arg=3, dim=0, axes="y")],
                                      mesh={"y": 4}, check_each_step=True)
        slicer.propagate(module, check_each_step=True)
        result = str(module)
    assert [step.split()[0] for step, _ in checked] == ["tactic", "tactic", "slicer-propagate"], checked
    assert all(changed for _, changed in checked), checked
    check_equivalent(MLP, result, step="tactics and propagation")
