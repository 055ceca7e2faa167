"""slicer.strategies on a training step written by hand (test/unit/api/mlp_training_step.py, no torch): the
tactic lists of data parallel, ZeRO 1-3 and Megatron, compiled alone and composed, with the distributed types and
collectives each gives, and the step's results equal to numpy's on the simulator."""

import re
from collections import Counter

import numpy as np
import pytest
from mlp_training_step import RESULT_NAMES, numpy_step, random_arrays, step_program  # test/unit/api

import slicer
from slicer import strategies as st

ARRAYS = random_arrays()


STEP = step_program(ARRAYS)
COLUMN, ROW = ["fc1.*"], ["fc2.*"]


def compiled(tactics, **mesh):
    """The step compiled with `tactics`, checked against numpy on the simulator. Buckets off: the collectives
    counted here are the partitioner's, one per gradient (the schedule's bucketing would combine them)."""
    prog = slicer.compile(STEP, mesh=slicer.Mesh(**mesh), tactics=tactics, buckets="off")
    out = prog.run(ARRAYS["x"], ARRAYS["t"])
    want = numpy_step(ARRAYS)
    for name, got in zip(RESULT_NAMES, out):
        np.testing.assert_allclose(got, want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    return prog


def collectives(prog) -> Counter:
    """(collective, axes) -> how many, from `explain()`."""
    found = re.findall(r"^\s*\d+\. (?:shard|slicer)\.(\w+) over \[([\w,]+)\]", prog.explain(), re.MULTILINE)
    return Counter(found)


def arg_dists(prog) -> dict[str, str]:
    return dict(re.findall(r"^  arg #\d+ \((\S+)\): .*? as (\S+) \(local", prog.explain(), re.MULTILINE))


def result_dists(prog) -> list[str]:
    return re.findall(r"^  result #\d+(?: \([^)]*\))?: \[[\d, ]*\] as (\S+) ", prog.explain(), re.MULTILINE)


@pytest.mark.slow
def test_data_parallel_tiles_the_batch_and_all_reduces_each_gradient():
    tactics = st.data_parallel(STEP, "x")
    assert tactics == [slicer.Tile(arg="x", dim=0, axes="x"), slicer.Tile(arg="t", dim=0, axes="x")]
    prog = compiled(tactics, x=2)
    assert arg_dists(prog)["fc1.weight"] == "[[],[]]" and arg_dists(prog)["x"] == "[[x],[]]"
    assert collectives(prog) == Counter({("all_reduce", "x"): 5})  # the loss and 4 gradients


@pytest.mark.slow
def test_zero_1_and_2_shard_the_optimizer_state_reduce_scatter_gradients_and_gather_parameters():
    tactics = st.zero(STEP, "x", stage=1)
    assert st.zero(STEP, "x", stage=2) == tactics
    assert slicer.format_tactics(tactics) == (
        "x.0=x;t.0=x;momentum.fc1.weight.0=x;momentum.fc1.bias.0=x;momentum.fc2.weight.0=x;momentum.fc2.bias.0=x;"
        "result:momentum.fc1.weight.0=x;result:momentum.fc1.bias.0=x;result:momentum.fc2.weight.0=x;"
        "result:momentum.fc2.bias.0=x;result:fc1.weight=replicated;result:fc1.bias=replicated;"
        "result:fc2.weight=replicated;result:fc2.bias=replicated")
    prog = compiled(tactics, x=2)
    dists = arg_dists(prog)
    assert dists["momentum.fc2.weight"] == "[[x],[]]" and dists["fc2.weight"] == "[[],[]]" and dists["step"] == "[]"
    assert result_dists(prog)[1:5] == ["[[],[]]", "[[]]", "[[],[]]", "[[]]"]  # parameters leave whole
    assert collectives(prog) == Counter({("reduce_scatter", "x"): 4, ("all_gather", "x"): 4, ("all_reduce", "x"): 1})


@pytest.mark.slow
def test_zero_3_is_fsdp_parameters_gathered_gradients_reduce_scattered():
    prog = compiled(st.zero(STEP, "x", stage=3), x=2)
    dists = arg_dists(prog)
    assert dists["fc1.weight"] == dists["momentum.fc1.weight"] == "[[x],[]]" and dists["fc1.bias"] == "[[x]]"
    assert result_dists(prog)[1:9] == ["[[x],[]]", "[[x]]"] * 4  # results leave as their arguments came in
    assert collectives(prog) == Counter({("all_gather", "x"): 4, ("reduce_scatter", "x"): 4, ("all_reduce", "x"): 1})


def test_zero_shards_dims_the_axis_does_not_divide_in_padded_blocks_and_leaves_0d_state():
    for mesh in ({"x": 16}, None):
        tactics = st.zero(STEP, "x", stage=3, mesh=mesh)
        tiled = {t.arg for t in tactics if t.arg is not None}
        # fc1 has 16 rows, fc2 8, which |x|=16 does not divide: padded blocks all the same; step is 0-d
        assert "step" not in tiled and {"fc2.weight", "momentum.fc2.weight", "fc2.bias"} <= tiled, mesh


@pytest.mark.slow
def test_zero_3_on_dims_the_axis_does_not_divide_equals_numpy():
    tactics = st.zero(STEP, "x", stage=3, mesh={"x": 3})  # 16 and 8 rows on 3 devices: padded blocks
    assert {"fc1.weight", "fc2.weight", "momentum.fc2.weight"} <= {t.arg for t in tactics}
    dists = arg_dists(compiled(tactics, x=3))  # checked against numpy
    assert dists["fc1.weight"] == dists["fc2.weight"] == "[[x],[]]"


def test_megatron_splits_columns_and_rows_with_their_state_and_results():
    tactics = st.megatron(STEP, "y", column=COLUMN, row=ROW)
    assert slicer.format_tactics(tactics) == (
        "fc1.weight.0=y;fc1.bias.0=y;fc2.weight.1=y;momentum.fc1.weight.0=y;momentum.fc1.bias.0=y;"
        "momentum.fc2.weight.1=y;result:fc1.weight.0=y;result:fc1.bias.0=y;result:fc2.weight.1=y;"
        "result:momentum.fc1.weight.0=y;result:momentum.fc1.bias.0=y;result:momentum.fc2.weight.1=y")
    prog = compiled(tactics, y=2)
    dists = arg_dists(prog)
    assert (dists["fc1.weight"], dists["fc2.weight"], dists["fc2.bias"]) == ("[[y],[]]", "[[],[y]]", "[[]]")
    assert collectives(prog) == Counter({("all_reduce", "y"): 1})  # the forward's row-parallel partial sums


@pytest.mark.slow
def test_data_megatron_and_fsdp_compose_on_two_axes():
    tp = st.megatron(STEP, "y", column=COLUMN, row=ROW)
    tactics = st.data_parallel(STEP, "x") + tp + st.zero(STEP, "x", stage=3, mesh={"x": 2, "y": 2}, after=tp)
    prog = compiled(tactics, x=2, y=2)
    dists = arg_dists(prog)
    # FSDP shards the dim Megatron leaves free: gathering over x rebuilds the y block Megatron computes with
    assert (dists["fc1.weight"], dists["fc2.weight"], dists["fc1.bias"], dists["fc2.bias"]) == (
        "[[y],[x]]", "[[x],[y]]", "[[y]]", "[[x]]")
    assert dists["momentum.fc1.weight"] == "[[y],[x]]"
    found = collectives(prog)
    assert found[("all_gather", "x")] == 3 and found[("reduce_scatter", "x")] == 3  # the weights and fc2's bias


def test_strategies_tiling_one_dim_twice_are_refused_clearly():
    tp = st.megatron(STEP, "y", column=COLUMN, row=ROW)
    with pytest.raises(slicer.CompileError, match=r"Tile\(arg='fc1.weight', dim=0, axes='x'\): dim 0 of argument #2 "
                                                  r"\(fc1.weight\) of @train_step is already tiled over y"):
        slicer.compile(STEP, mesh=slicer.Mesh(x=2, y=2), tactics=tp + st.zero(STEP, "x", stage=3))


def test_repeated_data_parallel_tactics_compose():
    tactics = st.data_parallel(STEP, "x") + st.zero(STEP, "x", stage=1)
    assert tactics[:2] == tactics[2:4]
    module = slicer.apply_tactics(STEP.text, tactics, mesh={"x": 2})
    assert str(module).count("Tile(arg='x', dim=0, axes='x')") == 1


def test_not_a_training_step_is_a_clear_error():
    plain = slicer.ImportedProgram(STEP.text, STEP.arg_names, 2, STEP.parameters, "train_step", "a forward pass")
    with pytest.raises(slicer.InvalidTactic, match="a forward pass is not a training step: its arguments have no "
                                                   "roles"):
        st.data_parallel(plain, "x")
    with pytest.raises(slicer.InvalidTactic, match="expected an imported training step .* got str"):
        st.zero(STEP.text, "x")


@pytest.mark.parametrize("call, message", [
    (lambda: st.megatron(STEP, "y", column=["fc3.*"]),
     "the column pattern 'fc3.*' matches no parameter of a hand-written MLP step (closest: 'fc2.bias', 'fc1.bias', "
     "'fc2.weight')"),
    (lambda: st.megatron(STEP, "y", column=["fc1.*"], row=["*.weight"]),
     "parameter 'fc1.weight' matches both a column and a row pattern"),
    (lambda: st.megatron(STEP, "y"), "give column= and/or row= patterns"),
    (lambda: st.megatron(STEP, "y", column="fc1.*"), "take lists of patterns"),
    (lambda: st.megatron(STEP, "x", row=["x"]), "the row pattern 'x' matches no parameter"),
    (lambda: st.zero(STEP, "x", stage=4), "stage=4 must be 1, 2 or 3"),
    (lambda: st.zero(STEP, "z", mesh={"x": 2}), "unknown mesh axis 'z'"),
    (lambda: st.data_parallel(STEP, ""), "axis='' must be a mesh axis name"),
])
def test_bad_strategy_arguments_are_clear_errors(call, message):
    with pytest.raises(slicer.InvalidTactic, match=re.escape(message)):
        call()


@pytest.mark.slow
def test_results_named_like_arguments_follow_their_layout_unless_a_tactic_names_them():
    tactics = [slicer.Tile(arg="x", dim=0, axes="x"), slicer.Tile(arg="fc1.weight", dim=0, axes="x"),
               slicer.Tile(result="fc2.weight", dim=1, axes="x")]
    assert st.follow_arguments(STEP, tactics)[:2] == [slicer.Tile(result="fc1.weight", dim=0, axes="x"),
                                                    slicer.Replicate(result="fc1.bias")]
    prog = compiled(tactics, x=2)
    args, results = arg_dists(prog), dict(zip(RESULT_NAMES, result_dists(prog)))
    assert results["fc1.weight"] == args["fc1.weight"] == "[[x],[]]"  # followed its argument
    assert results["fc2.weight"] == "[[],[x]]"  # the user's own tactic wins
    assert all(results[n] == args[n] for n in RESULT_NAMES if n in args and n != "fc2.weight")
    assert st.follow_arguments(slicer.ImportedProgram("", ("x",), 1, (), "f"), tactics) == []  # no result names
