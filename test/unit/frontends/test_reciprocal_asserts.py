"""BatchNorm in eval mode: torch-mlir's `cf.assert "unimplemented: tensor with zero element"` on each reciprocal
is dropped at import (frontends/cleanup.py), so no result-less generic reads the conv output and data
parallelism needs no collective; the result equals torch (a zero divisor still gives torch's inf)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import slicer  # noqa: E402
from example_modules import collective_ops, load  # noqa: E402

models = load("torch/models.py", "torch_models")


@pytest.mark.slow
def test_batchnorm_cnn_is_data_parallel_without_collectives():
    model, inputs = models.cnn()
    imported = slicer.from_torch(model, *inputs)
    assert "cf.assert" not in imported.text
    assert "cf.assert" in slicer.from_torch(model, *inputs, cleanup=False).text  # torch-mlir does emit them
    prog = slicer.compile(imported, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics("x.0=x"))
    assert collective_ops(prog) == []
    assert models.relative_error(prog.run(*inputs), models.eager(model, inputs)) <= 1e-5


def test_a_zero_divisor_gives_torchs_inf():
    imported = slicer.from_torch(lambda v: torch.reciprocal(torch.sqrt(v)), torch.ones(4))
    assert "cf.assert" not in imported.text
    prog = slicer.compile(imported, mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics("v.0=x"))
    v = np.array([4.0, 0.0, 1.0, 0.25], np.float32)
    np.testing.assert_array_equal(prog.run(v), torch.reciprocal(torch.sqrt(torch.from_numpy(v))).numpy())
