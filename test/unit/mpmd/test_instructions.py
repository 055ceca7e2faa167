"""A pipelined module lowered to each stage's instructions: the module a two-stage 1F1B schedule builds
parses with the `slicer` dialect, every send meets its receive, and transfers that would wait for each other
or miss their peer are refused."""

import pytest

from slicer.core.errors import CompileError
from slicer.mpmd.instructions import Stage, check_transfers, lower_module
from slicer.mpmd.pipeline_schedule import make_schedule
from slicer.mpmd.stage_module import CalleeSignature, Link, StageFunctions, build_module

ACT, W, LOSS = "tensor<2x4xf32>", "tensor<4x4xf32>", "tensor<f32>"


def _stage(index: int, last: bool) -> StageFunctions:
    received = () if index == 0 else ("s0.0",)
    batch = ("x",) if index == 0 else ()
    front = [("x", ACT)] if index == 0 else [("s0.0", ACT)]
    grads_in = [] if last else [("grad.s0.0", ACT)]
    saved = f"s{index}.saved.0"  # an activation the forward keeps for the backward
    forward = CalleeSignature((*front, ("w", W)), ((("loss", LOSS),) if last else (("s0.0", ACT),)) + ((saved, ACT),))
    back_results = (([("grad.s0.0", ACT)] if index else []) + [(f"grad.w{index}", W)])
    backward = CalleeSignature((*front, (saved, ACT), *grads_in, ("w", W), (f"grad.w{index}", W)),
                               tuple(back_results))
    update = CalleeSignature(((f"grad.w{index}", W), ("w", W), ("lr", "tensor<f64>")), (("w", W),))
    return StageFunctions(index, forward, backward, update, batch, received, () if last else ("s0.0",), (saved,),
                          ("w",), (), ("lr",))


def _module(schedule: str = "1f1b", microbatches: int = 3) -> str:
    stages = (_stage(0, False), _stage(1, True))
    link = Link("s0.0", 0, (1,), ACT, True)
    return build_module(make_schedule(schedule, 2, microbatches), stages, (link,), "p")


def test_two_stage_module_lowers_to_matching_transfers():
    text = _module()
    assert text.count('"slicer.send"') == text.count('"slicer.recv"') == 6  # 3 activations, 3 gradients
    stages = lower_module(text)
    assert [s.index for s in stages] == [0, 1]
    assert stages[0].args == ("x.m0", "x.m1", "x.m2", "w", "lr") and stages[0].results == ("w",)
    assert stages[1].results == ("loss", "w")
    kinds = [i["op"] for i in stages[1].instructions]
    assert kinds[:4] == ["recv", "call", "zeros", "call"]  # F0, then B0 from zero gradients (1F1B, last stage)
    assert kinds[-1] == "return"


def test_gpipe_module_lowers_too():
    stages = lower_module(_module("gpipe", 2))
    assert [i["callee"] for i in stages[0].instructions if i["op"] == "call"] == [
        "forward_0", "forward_0", "backward_0", "backward_0", "update_0"]


def _send(tag, peer):
    return {"op": "send", "operand": 0, "message": tag, "stage": peer}


def _recv(tag, peer):
    return {"op": "recv", "result": 1, "message": tag, "stage": peer, "shape": [1], "dtype": "<f4"}


def test_receives_before_sends_on_both_sides_deadlock():
    stages = [Stage(0, (), (), (_recv(1, 1), _send(0, 1))), Stage(1, (), (), (_recv(0, 0), _send(1, 0)))]
    with pytest.raises(CompileError, match="deadlocks"):
        check_transfers(stages)


def test_a_send_without_its_receive_is_refused():
    with pytest.raises(CompileError, match="no receive"):
        check_transfers([Stage(0, (), (), (_send(0, 1),)), Stage(1, (), (), ())])
