"""Slicer: partition linalg-on-tensors programs over a device mesh."""
from .tactics import InvalidTactic, Replicate, TacticError, Tile, apply_tactics, format_tactics, parse_tactics  # noqa: E402,F401
from .propagation.api import explain, propagate  # noqa: E402,F401
from .api import CompileError, Program, RunError, compile  # noqa: E402,F401,A004
from .redistribution import Mesh  # noqa: E402,F401
