"""A training step with its sequence tiled (issue 50): nanoGPT (examples/torch/idioms.py, attention written with
`F.scaled_dot_product_attention`, causal or with a padding mask) with the token ids and targets tiled on dim 1 over x,
on the simulator with 2 and 4 devices, equal to torch eager. The loss reads the logits as `logits.flatten(0, 1)`, whose
collapsed dim has the sequence as its minor dim: the import-time cleanup (`reshape_per_use`) expands the loss's ops (and
every linear layer's gradient) over [B, S], so the loss is computed where the blocks are. No DegradedStrategy,
and the only all_gathers are attention's (K and V of each block, [.., S, E] per head: today's sequence
parallelism holds them whole); the same on 2 MPI ranks in test/mpi/test_training_idioms_mpi.py."""

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from mlir import ir  # noqa: E402

import slicer  # noqa: E402
from example_modules import load  # noqa: E402
from slicer.dialect import make_context  # noqa: E402
from slicer.spmd import report  # noqa: E402

idioms = load("torch/idioms.py", "idioms")
train = idioms.train_step
SGD = slicer.SGD(0.1, momentum=0.9)
SEQUENCE = [slicer.Tile(arg="idx", dim=1, axes="x"), slicer.Tile(arg="targets", dim=1, axes="x")]


def collectives(prog):
    with make_context():
        return report(ir.Module.parse(prog.spmd)).collectives


def sequence_tiled(step, devices: int):
    with warnings.catch_warnings():
        warnings.simplefilter("error", slicer.DegradedStrategy)
        return slicer.compile(step, mesh=slicer.Mesh(x=devices), tactics=SEQUENCE)


@pytest.mark.parametrize("kind, devices, rows",
                         [("causal", 2, 2), ("causal", 4, 2), ("masked", 2, 2), ("causal", 2, 1)])
@pytest.mark.slow
def test_sequence_tiled_training_step_keeps_the_loss_where_the_blocks_are(kind, devices, rows):
    """Causal attention (is_causal, scale=, GQA both ways) on 2 and 4 devices; padding masks (boolean and
    additive, [B, 1, 1, S], given whole) on 2; a batch of one sequence, whose positions (`arange(S)`, the
    unit batch dim folded away) the position embedding reads at the loop's own index (`rules/gathers.py`)."""
    model, loss_fn, batch = idioms.nano_gpt(kind, batch=rows, seq=8)
    step = slicer.training_step(model, loss_fn, *batch, optimizer=SGD)
    prog = sequence_tiled(step, devices)
    gathered = [c.local_after for c in collectives(prog) if c.op == "shard.all_gather"]
    assert len(gathered) >= 2 * len(model.blocks)  # K and V of each block, whole [.., S, E] per head ...
    assert all(tuple(n for n in shape if n != 1)[-2:] in ((8, 4), (4, 8)) for shape in gathered), gathered  # ... only
    loss_error, param_error = train.compare(model, loss_fn, batch, SGD, prog, steps=3)
    assert loss_error <= 1e-5 and param_error <= 1e-5, (loss_error, param_error)
