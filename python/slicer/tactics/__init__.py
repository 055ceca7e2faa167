"""Tactics (docs/tactics.md; layer 5 of docs/architecture.md): the user's partitioning requests as values,
and their application to a program as `slicer.loop`/`slicer.slice`.

    from slicer.tactics import Tile, Replicate, parse_tactics, TacticRewriter
"""

from slicer.core.errors import InvalidTactic, TacticError

from .requests import NEW_MESH_NAME
from .rewrite import TacticRewriter
from .values import REMAT_POLICIES, TEXT_SYNTAX, Remat, Replicate, Tactic, Tile, format_tactics, parse_tactics

__all__ = ["InvalidTactic", "NEW_MESH_NAME", "REMAT_POLICIES", "Remat", "Replicate", "TEXT_SYNTAX", "Tactic",
           "TacticError", "TacticRewriter", "Tile", "format_tactics", "parse_tactics"]
