"""Live resharding on 2 MPI ranks (`Session.reshard`, runtime/state/reshard.py): a training session of the 2-block GPT
of examples/training (SGD with momentum) switched data parallel -> ZeRO-3 -> data parallel -> ZeRO-3 (FSDP) ->
Megatron on y=2 (another mesh: planned on one axis over both ranks) on one job, a step or two under each (the
switches back to a program run before take the one the ranks kept loaded; Megatron's is preloaded). After
every switch the state equals, bit for bit, what saving it and loading the checkpoint in that session gives,
and the losses and final parameters equal torch eager's. A program needing state the session lacks, or on
another device count, is refused before anything moves and the session goes on. Train then serve: a forward
program under Megatron takes the parameters trained under FSDP, its logits equal torch's."""

import copy
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer import strategies as st  # noqa: E402
from slicer.core.errors import InputError, RunError  # noqa: E402
from slicer.runtime.jobs.mpiexec import run_spmd  # noqa: E402

train = load("torch/train_step.py", "train_step")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "training"))
import model as gpt_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "runtime"))
from session_programs import STEP, data, expected  # noqa: E402

SGD = slicer.SGD(0.1, momentum=0.9, weight_decay=0.01)


@pytest.fixture(scope="module")
def gpt():
    """(model, loss_fn, batch, {strategy: compiled training step})."""
    torch.manual_seed(0)
    model = gpt_model.GPT(vocab=16, seq=8, d_model=16, n_head=2, n_layer=2)
    batch = gpt_model.batch(torch.Generator().manual_seed(0), 4, 8, 16)
    step = slicer.training_step(model, gpt_model.loss_fn, *batch, optimizer=SGD)
    programs = {
        "data": slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x")),
        "zero3": slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.zero(step, "x", stage=3)),
        "megatron": slicer.compile(step, mesh=slicer.Mesh(y=2), tactics=st.megatron(step, "y", **gpt_model.MEGATRON)),
    }
    return model, gpt_model.loss_fn, batch, programs


@pytest.mark.slow
def test_a_gpt_session_resharded_between_strategies_is_bit_identical_to_save_and_load_and_trains_as_torch(
        gpt, tmp_path):
    model, loss_fn, batch, programs = gpt
    chain = [("data", 1), ("zero3", 1), ("data", 1), ("zero3", 0), ("megatron", 2)]
    want_losses, want_params = train.torch_steps(model, loss_fn, batch, SGD, sum(n for _, n in chain))
    losses = []
    s = programs["data"].session(ranks=2, timeout=300)
    try:
        losses.append(float(s.step(*batch)))
        for k, (name, steps) in enumerate(chain[1:]):
            s.save(tmp_path / f"ck{k}")
            before = s.state_dict()
            if name == "megatron":  # loaded ahead (`preload`): the switch only moves the state
                s.preload(programs[name])
                assert not s.preload(programs[name]) and s.state_dict().keys() == before.keys()
            old, s = s, s.reshard(programs[name])
            # A program the ranks ran before is kept loaded (runtime/state/loaded_programs.py): switching back to it
            # runs the moves only. (A first switch may find its program kept too: the job may be lent by the pool
            # after another session ran it.)
            if name in [n for n, _ in chain[:k + 1]] or name == "megatron":
                assert s.kept_program, name
            assert s.move_peak_bytes >= 0
            with pytest.raises(RunError, match="was resharded"):
                old.step(*batch)  # the old session's ranks run the new program now
            assert s.resharded is not None and len(s.resharded.moves) == len(before)
            moved = s.state_dict()
            s.load(tmp_path / f"ck{k}")  # save + load of the same state, on the new layout
            loaded = s.state_dict()
            assert list(moved) == list(loaded) == list(before)
            for value, want in loaded.items():
                assert np.array_equal(moved[value], want) and np.array_equal(want, before[value]), (name, value)
            losses += [float(s.step(*batch)) for _ in range(steps)]
        final = s.state_dict()
        assert s.steps == len(want_losses)
    finally:
        s.close()
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for value, want in want_params.items():
        assert train.relative_error(final[value], want) < 1e-5, value


@pytest.mark.slow
def test_a_switch_that_cannot_be_made_live_is_refused_before_anything_moves(gpt):
    model, loss_fn, batch, programs = gpt
    four = slicer.compile(STEP, mesh=slicer.Mesh(x=4), tactics=[slicer.Tile(arg="x", dim=0, axes="x")])
    s = programs["data"].session(ranks=2, timeout=300)
    try:
        first = s.state_dict()
        target = programs["megatron"].session_plan()
        renamed = replace(target, arg_names=tuple(n + ".new" if i in target.state else n
                                                  for i, n in enumerate(target.arg_names)))
        with pytest.raises(InputError, match="that the session does not hold"):
            s.reshard(renamed)
        with pytest.raises(InputError, match=r"4 devices\): live resharding keeps the ranks; save the session"):
            s.reshard(four)
        after = s.state_dict()
        assert all(np.array_equal(after[n], v) for n, v in first.items())
        s.step(*batch)  # the session goes on
    finally:
        s.close()


def test_a_session_inside_an_mpiexec_job_reshards_on_its_ranks():
    here = Path(__file__).parent
    done = run_spmd(2, [sys.executable, str(here / "reshard_worker.py"), str(here.parent / "unit" / "runtime")],
                    timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("reshard ok") == 2


@pytest.mark.slow
def test_train_under_fsdp_then_serve_under_megatron_on_the_same_ranks(gpt):
    """The trained parameters move into a forward program (slicer.from_torch) under Megatron on y=2; the
    optimizer's momentum is dropped; the logits equal the torch model's with the trained parameters."""
    model, loss_fn, batch, programs = gpt
    forward = slicer.from_torch(model, batch[0])
    serve = slicer.compile(forward, mesh=slicer.Mesh(y=2), tactics=st.megatron(forward, "y", **gpt_model.MEGATRON))
    s = programs["zero3"].session(ranks=2, timeout=300)
    try:
        s.step(*batch)
        trained = s.state_dict()
        s = s.reshard(serve)
        assert s.resharded.dropped and all(n.startswith("momentum.") for n in s.resharded.dropped)
        logits = s.step(batch[0])
    finally:
        s.close()
    served = copy.deepcopy(model)
    with torch.no_grad():
        for name, parameter in served.named_parameters():
            parameter.copy_(torch.from_numpy(trained[name]))
        want = served(batch[0]).numpy()
    assert train.relative_error(logits, want) < 1e-5


@pytest.mark.slow
def test_four_ranks_move_their_state_between_a_2x2_mesh_and_a_line_of_4_and_back():
    """x=2,y=2 -> x=4 -> x=2,y=2 on 4 real ranks (sub-axes of one axis of 4, `subaxes`): w's rows split over y,
    then over all 4, then over y again (the line preloaded); after each switch the state equals numpy's bit for
    bit and the steps go on as numpy's."""
    x, w0 = data()
    outs, w_final = expected(x, w0, 3)
    grid = slicer.compile(STEP, mesh=slicer.Mesh(x=2, y=2), tactics=[
        slicer.Tile(arg="x", dim=0, axes="x"), slicer.Tile(arg="w", dim=0, axes="y"),
        slicer.Tile(result=1, dim=0, axes="y")])
    line = slicer.compile(STEP, mesh=slicer.Mesh(x=4), tactics=[
        slicer.Tile(arg="x", dim=0, axes="x"), slicer.Tile(arg="w", dim=0, axes="x"),
        slicer.Tile(result=1, dim=0, axes="x")])
    s = grid.session(ranks=4, state={"w": w0}, oversubscribe=True, timeout=300)
    try:
        np.testing.assert_allclose(s.step(x), outs[0], rtol=1e-5)
        assert s.preload(line)
        for k, program in enumerate((line, grid)):
            s = s.reshard(program)
            assert s.kept_program  # the line was preloaded, the grid ran before
            np.testing.assert_array_equal(s.state_dict()["w"], w0 * 2 ** (k + 1))
            np.testing.assert_allclose(s.step(x), outs[k + 1], rtol=1e-5)
        np.testing.assert_array_equal(s.state_dict()["w"], w_final)
    finally:
        s.close()
