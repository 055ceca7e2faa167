"""Run under mpiexec by test_session_safety_mpi.py: a bad batch (a token id past the embedding's table, in rank
1's half) in a small GPT's training step inside the user's MPI job raises KernelAssertionError on every rank,
the state stays bit for bit as before, and the next good step equals torch's; `Program.run_in_mpi` of the bad
batch raises on every rank too."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # test/: example_modules

import slicer
from example_modules import load
from slicer import strategies as st
from slicer.core.errors import KernelAssertionError


def gpt_step():
    """(examples/torch/train_step.py, model, loss_fn, batch, optimizer, the step compiled data-parallel on x=2):
    the small GPT both this worker and test_session_safety_mpi.py train."""
    train = load("torch/train_step.py", "train_step")
    adamw = slicer.AdamW(0.01, betas=(0.9, 0.99), weight_decay=0.1)
    model, loss_fn, batch = train.gpt()
    train.freeze_attention_bias(model)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=adamw)
    prog = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=st.data_parallel(step, "x"))
    return train, model, loss_fn, batch, adamw, prog


def main():
    train, model, loss_fn, batch, adamw, prog = gpt_step()
    want_losses, want_params = train.torch_steps(model, loss_fn, batch, adamw, 2)
    idx, targets = batch
    bad = idx.clone()
    bad[3, 0] = model.wte.num_embeddings + 5
    with prog.session() as s:
        losses = [float(s.step(*batch))]
        before = s.state_dict()
        try:
            s.step(bad, targets)
            raise AssertionError("a token id past the table was taken")
        except KernelAssertionError as exc:
            assert "rank 1" in str(exc) and "'idx'" in str(exc), exc
        after = s.state_dict()
        assert s.steps == 1 and all(np.array_equal(after[n], before[n]) for n in before)
        losses.append(float(s.step(*batch)))
        final = s.state_dict()
    try:  # a plain run under the job (Program.run_in_mpi) fails alike on every rank, none left waiting
        prog.run_in_mpi(bad, targets)
        raise AssertionError("a token id past the table was taken")
    except KernelAssertionError as exc:
        assert "rank 1" in str(exc) and "index must be smaller than dim size" in str(exc), exc
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    assert all(train.relative_error(final[n], w) < 1e-5 for n, w in want_params.items())
    print("refused ok")


if __name__ == "__main__":
    main()
