"""Programs from frameworks (layer 13 of docs/architecture.md, under `slicer.strategies` and `slicer.api`): `from_torch` imports a
PyTorch module or tensor function through torch-mlir into an `ImportedProgram` (MLIR with named arguments and
the parameters bound), cleaned up for partitioning (`cleanup.py`). The frameworks are optional dependencies,
imported when first used."""

from .cleanup import clean_up, split_into_pieces
from .program import ARG_ROLES, ImportedProgram, as_array
from .pytorch import from_torch

__all__ = ["ARG_ROLES", "ImportedProgram", "as_array", "clean_up", "from_torch", "split_into_pieces"]
