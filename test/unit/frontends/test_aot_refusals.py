"""Ahead-of-time kernels: RMSNorm's `x.pow(2).mean(-1)` compiles AOT with no refusal (math.fpowi is expanded
in the kernel pipeline), and when the AOT path does refuse a kernel, the warning carries the whole cause (every
diagnostic line, not only "Failure while executing pass pipeline:")."""

import logging

import numpy as np
import pytest

import slicer
from slicer.lowering import build_kernel_graph
from slicer.runtime.execution.executor import load_kernels

REFUSED = "AOT kernel compilation refused"

# complex.exp has no lowering in the kernel pipeline: mlir-translate refuses it, over several lines (the
# translation in this process fails first, and the tools are run for their error, which names the op)
COMPLEX = """func.func @k(%a: tensor<16xf32>) -> tensor<16xf32> {
  %e = tensor.empty() : tensor<16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%x: f32, %o: f32):
    %c = complex.create %x, %x : complex<f32>
    %d = complex.exp %c : complex<f32>
    %z = complex.abs %d : complex<f32>
    linalg.yield %z : f32
  } -> tensor<16xf32>
  return %r : tensor<16xf32>
}"""


def test_the_refusal_warning_carries_every_line_of_the_cause(caplog):
    prog = slicer.compile(COMPLEX, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg=0, dim=0, axes="x")])
    with caplog.at_level(logging.WARNING, logger="slicer.runtime"):
        try:
            load_kernels(build_kernel_graph(prog.spmd))
        except slicer.SlicerError:
            pass  # the JIT may refuse it too: the warning is what is checked
    [warning] = [r.getMessage() for r in caplog.records if REFUSED in r.getMessage()]
    assert "complex.exp" in warning
    assert "Available dialects" in warning  # a later line of the diagnostic, cut off before


def test_rmsnorm_compiles_ahead_of_time_without_refusal(caplog):
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_mlir")

    class RMSNorm(torch.nn.Module):
        def __init__(self, dim: int):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.rand(dim) + 0.5)

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight

    model, x = RMSNorm(32), torch.randn(4, 8, 32)
    prog = slicer.compile(slicer.from_torch(model, x), mesh=slicer.Mesh(x=2), tactics=slicer.parse_tactics("x.0=x"))
    with caplog.at_level(logging.WARNING, logger="slicer.runtime"):
        got = prog.run(x)
    assert not [r for r in caplog.records if REFUSED in r.getMessage()]
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
