"""Slicer: partition linalg-on-tensors programs over a device mesh and run them as SPMD programs over MPI.

The public API (docs/architecture.md shows the layers behind it):

    import slicer
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=4), tactics=[slicer.Tile(arg=1, dim=1, axes="y")])
    print(prog.explain())
    out = prog.run(*arrays, ranks=8)

    imported = slicer.from_torch(model, x)          # a PyTorch module: arguments named, parameters bound
    prog = slicer.compile(imported, mesh=slicer.Mesh(y=4), tactics=[slicer.Tile(arg="fc1.weight", dim=0, axes="y")])
    out = prog.run(x, ranks=4)                      # the model's inputs only

Every error Slicer raises for something the user can change is a `slicer.SlicerError`.
"""

from .api import Program, apply_tactics, compile, propagate  # noqa: A004 - `compile` is the front door's name
from .core.errors import (CompileError, FrontendError, InputError, InvalidTactic, KernelAssertionError, KernelError,
                          LaunchError,
                          MeshError, PipelineError, RedistributionError, ResourceError, RunError, SimulationError,
                          SlicerError, StepMismatch, TacticError, VizError)
from .frontends import ImportedProgram, from_torch
from .core.mesh import Mesh
from .propagation import explain
from .runtime import Timings
from .tactics import Replicate, Tile, format_tactics, parse_tactics

__all__ = [
    "Mesh", "Tile", "Replicate", "parse_tactics", "format_tactics",
    "compile", "Program", "Timings", "apply_tactics", "propagate", "explain", "from_torch", "ImportedProgram",
    "SlicerError", "CompileError", "TacticError", "InvalidTactic", "PipelineError", "StepMismatch", "MeshError",
    "RedistributionError", "KernelError", "RunError", "InputError", "LaunchError", "ResourceError",
    "SimulationError", "KernelAssertionError", "VizError", "FrontendError",
]
