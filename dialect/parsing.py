"""Parse MLIR text as `mlir-opt` does, keeping the real file name in every location.

`ir.Module.parse` names its input buffer "-" in locations; diagnostics and the collectives' provenance
must point at the user's file instead.
"""

from __future__ import annotations

from mlir import ir

from slicer.core.operations import map_locations

PARSER_BUFFER_NAME = "-"  # what ir.Module.parse calls its input in locations


def parse_source(text: str, filename: str) -> ir.Operation:
    """Parse `text` as a module like mlir-opt does (attribute aliases, an implicit module), with `filename`
    in every location. Needs a current context with the slicer dialect loaded (`make_context()`)."""
    module = ir.Module.parse(text).operation

    def rename(loc: ir.Location) -> ir.Location:
        if loc.is_a_file() and loc.filename == PARSER_BUFFER_NAME:
            return ir.Location.file(filename, loc.start_line, loc.start_col)
        return loc

    map_locations(module, rename)
    return module
