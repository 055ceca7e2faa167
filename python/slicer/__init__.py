"""Slicer: partition linalg-on-tensors programs over a device mesh and run them as SPMD programs over MPI.

The public API (docs/architecture.md shows the layers behind it):

    import slicer
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=4), tactics=[slicer.Tile(arg=1, dim=1, axes="y")])
    print(prog.explain())
    out = prog.run(*arrays, ranks=8)

    imported = slicer.from_torch(model, x)          # a PyTorch module: arguments named, parameters bound
    prog = slicer.compile(imported, mesh=slicer.Mesh(y=4), tactics=[slicer.Tile(arg="fc1.weight", dim=0, axes="y")])
    out = prog.run(x, ranks=4)                      # the model's inputs only

    step = slicer.training_step(model, loss_fn, x, y, optimizer=slicer.AdamW(lr=1e-3))   # loss, backward, update
    loss, *new = slicer.compile(step, mesh=slicer.Mesh(x=2), tactics=[slicer.Tile(arg="x", dim=0, axes="x")]).run(x, y)
    tactics = slicer.strategies.zero(step, "x", stage=3)  # a training step (ImportedProgram with roles): FSDP

Every error Slicer raises for something the user can change is a `slicer.SlicerError`. More: docs/module-notes.md.
"""

from .core.errors import INTERNAL as _INTERNAL
from .core.errors import __all__ as _errors
from .core.lazy import lazy_exports

_ERRORS = [name for name in _errors if name != "Located" and name not in _INTERNAL]

_EXPORTS = {
    "Mesh": ".core.mesh",
    "Tile": ".tactics", "Replicate": ".tactics", "Remat": ".tactics", "parse_tactics": ".tactics",
    "format_tactics": ".tactics",
    "compile": ".api", "auto": ".automatic_api", "Program": ".api", "apply_tactics": ".api", "propagate": ".api",
    "Timings": ".runtime", "explain": ".propagation", "from_torch": ".frontends", "ImportedProgram": ".frontends",
    "strategies": ".strategies", "load_checkpoint": ".runtime.state.checkpoint",
    "training_step": ".frontends", "torch_state": ".frontends", "SGD": ".frontends", "AdamW": ".frontends",
    "schedules": ".frontends", "dropout_mask": ".frontends", "MixedPrecision": ".frontends",
    **{name: ".core.errors" for name in _ERRORS},
}

__all__ = [
    "Mesh", "Tile", "Replicate", "Remat", "parse_tactics", "format_tactics",
    "compile", "auto", "Program", "Timings", "apply_tactics", "propagate", "explain", "from_torch", "ImportedProgram",
    "strategies", "training_step", "SGD", "AdamW", "schedules", "load_checkpoint", "torch_state", "dropout_mask",
    "MixedPrecision", *_ERRORS,
]
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
