"""Slicer: partition linalg-on-tensors programs over a device mesh and run them as SPMD programs over MPI.

The public API (docs/architecture.md shows the layers behind it):

    import slicer
    prog = slicer.compile(text, mesh=slicer.Mesh(x=2, y=4), tactics=[slicer.Tile(arg=1, dim=1, axes="y")])
    print(prog.explain())
    out = prog.run(*arrays, ranks=8)

Every error Slicer raises for something the user can change is a `slicer.SlicerError`.
"""

from .api import Program, apply_tactics, compile, propagate  # noqa: A004 - `compile` is the front door's name
from .core.errors import (CompileError, InputError, InvalidTactic, KernelError, LaunchError, MeshError,
                          PipelineError, RedistributionError, ResourceError, RunError, SimulationError, SlicerError,
                          StepMismatch, TacticError, VizError)
from .core.mesh import Mesh
from .propagation import explain
from .runtime import Timings
from .tactics import Replicate, Tile, format_tactics, parse_tactics

__all__ = [
    "Mesh", "Tile", "Replicate", "parse_tactics", "format_tactics",
    "compile", "Program", "Timings", "apply_tactics", "propagate", "explain",
    "SlicerError", "CompileError", "TacticError", "InvalidTactic", "PipelineError", "StepMismatch", "MeshError",
    "RedistributionError", "KernelError", "RunError", "InputError", "LaunchError", "ResourceError",
    "SimulationError", "VizError",
]
