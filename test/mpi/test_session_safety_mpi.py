"""No step loses a session's state (issue 45), on 2 MPI ranks.

- `state_dict()` and `save()` of a session holding a gibibyte of state: the replies stream in chunks
  (runtime/jobs/wire.py) and the driver counts every frame as life, so the liveness check (here 2 s of silence)
  never trips; before, the driver sat in one `recv` of a rank's half gigabyte while the other's heartbeats
  waited unread, and ended the job.
- A step whose batch has a token id past the embedding's table (a small GPT's training step, data parallel,
  the bad id in rank 1's half while rank 0 waits in the gradients' all_reduce) raises KernelAssertionError
  naming the input, and the session goes on: the state bit for bit as before, the next good step equal to
  torch's. In a launched job and inside the user's own mpiexec job (safety_worker.py).
- A save a rank cannot write raises CheckpointError and the session goes on.
- Only a rank's death ends the session, and its RunError says which steps' state is lost since which
  checkpoint.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

import slicer
from rank_faults import kill_env
from slicer.core.errors import CheckpointError, KernelAssertionError, RunError
from slicer.runtime.jobs.mpiexec import run_spmd
from slicer.runtime.jobs.rank_job import SILENCE_ENV
from slicer.runtime.state.checkpoint import Checkpoint

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "unit" / "runtime"))
from session_programs import STEP, compiled, data  # noqa: E402

ROWS, COLUMNS = 16384, 16384  # an int32 state of 1 GiB, its rows split over the 2 ranks


def big_program():
    """w' = w + w on an int32 [ROWS, COLUMNS] w (rows over x=2), returning also a small y = x + x."""
    w, y = f"tensor<{ROWS}x{COLUMNS}xi32>", "tensor<2x2xi32>"
    text = f"""
func.func @step(%x: {y} {{slicer.name = "x"}}, %w: {w} {{slicer.name = "w"}})
    -> ({y} {{slicer.name = "y"}}, {w} {{slicer.name = "w"}}) {{
  %e = tensor.empty() : {w}
  %w2 = linalg.add ins(%w, %w : {w}, {w}) outs(%e : {w}) -> {w}
  %f = tensor.empty() : {y}
  %y = linalg.add ins(%x, %x : {y}, {y}) outs(%f : {y}) -> {y}
  return %y, %w2 : {y}, {w}
}}"""
    return slicer.compile(text, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="w", dim=0, axes="x"),
                                                                 slicer.Tile(result="w", dim=0, axes="x")])


@pytest.mark.slow
def test_state_dict_and_save_of_a_gibibyte_of_state_keep_the_job(tmp_path, monkeypatch):
    """About 15 s on a quiet 2-core machine, most of it the first touch of 4 GiB of fresh memory (the state, its
    blocks on the ranks, the state dict); up to 40 s on a loaded one."""
    monkeypatch.setenv(SILENCE_ENV, "2")  # stricter than the default 5 s
    w0 = np.arange(ROWS * COLUMNS, dtype=np.int32).reshape(ROWS, COLUMNS)
    with big_program().session(ranks=2, state={"w": w0}, timeout=300) as s:
        state = s.state_dict()
        assert np.array_equal(state["w"], w0)
        del state
        s.save(tmp_path / "ck")
        assert s.job.healthy
    checkpoint = Checkpoint.open(tmp_path / "ck")
    checkpoint.verify()  # every block's size and sha256 as the ranks recorded them
    for rank, rows in enumerate((slice(0, ROWS // 2), slice(ROWS // 2, ROWS))):
        assert np.array_equal(np.load(tmp_path / "ck" / f"001.w.r{rank}.npy", mmap_mode="r"), w0[rows])


@pytest.fixture(scope="module")
def gpt():
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")
    from safety_worker import gpt_step  # test/mpi: the worker's own GPT

    return (torch, *gpt_step())


@pytest.mark.slow
def test_a_bad_batch_is_refused_and_the_session_trains_on_as_torch(gpt):
    torch, train, model, loss_fn, batch, adamw, prog = gpt
    idx, targets = batch
    bad = idx.clone()
    bad[3, 5] = model.wte.num_embeddings  # row 3: rank 1's half of the batch
    want_losses, want_params = train.torch_steps(model, loss_fn, batch, adamw, 2)
    with prog.session(ranks=2, timeout=300) as s:
        first = float(s.step(*batch))
        before = s.state_dict()
        with pytest.raises(KernelAssertionError, match=r"not applied.*rank 1.*index must be smaller than dim "
                                                       r"size.*input\(s\) 'idx'"):
            s.step(bad, targets)
        assert s.steps == 1 and s.job.healthy
        after = s.state_dict()
        assert list(after) == list(before)
        assert all(np.array_equal(after[n], before[n]) for n in before)
        second = float(s.step(*batch))
        final = s.state_dict()
    np.testing.assert_allclose([first, second], want_losses, rtol=1e-5)
    for name, want in want_params.items():
        assert train.relative_error(final[name], want) < 1e-5, name


@pytest.mark.slow
def test_a_bad_batch_inside_an_mpiexec_job_is_refused_on_every_rank():
    done = run_spmd(2, [sys.executable, str(HERE / "safety_worker.py")], timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused ok") == 2


def test_a_save_a_rank_cannot_write_is_refused_and_the_session_goes_on(tmp_path):
    x, w0 = data()
    split = slicer.compile(STEP, mesh=slicer.Mesh(x=2), tactics=[
        slicer.Tile(arg="w", dim=0, axes="x"), slicer.Tile(result="w", dim=0, axes="x")])
    (tmp_path / "ck" / "001.w.r1.npy").mkdir(parents=True)  # rank 1's block file cannot be renamed into place
    with split.session(ranks=2, state={"w": w0}) as s:
        s.step(x)
        with pytest.raises(CheckpointError, match=r"rank 1: cannot write .*001\.w\.r1\.npy"):
            s.save(tmp_path / "ck")
        assert s.job.healthy and not (tmp_path / "ck" / "manifest.json").exists()
        s.step(x)
        s.save(tmp_path / "ok")
        assert np.array_equal(slicer.load_checkpoint(tmp_path / "ok")["w"], w0 * 4)


def test_a_rank_dying_says_which_steps_are_lost_since_the_checkpoint(tmp_path, monkeypatch):
    for name, text in kill_env("1:step2").items():  # rank 1 dies at the session's third step
        monkeypatch.setenv(name, text)
    x, w0 = data()
    s = compiled().session(ranks=2, state={"w": w0})
    s.step(x)
    s.save(tmp_path / "ck")
    s.step(x)
    with pytest.raises(RunError, match=r"went away[\s\S]*the state of step 2 since the checkpoint saved at step 1 "
                                       rf"in {tmp_path / 'ck'} is lost: load it in a new session"):
        s.step(x)
    with pytest.raises(RunError, match="has ended"):
        s.state_dict()
    s.close()
