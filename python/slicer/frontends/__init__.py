"""Programs from frameworks (layer 13 of docs/architecture.md, under `slicer.strategies` and `slicer.api`):
`from_torch` imports a PyTorch module or tensor function through torch-mlir into an `ImportedProgram` (MLIR with
named arguments and the parameters bound), `training_step` a whole training step (loss, backward and the update
of an optimizer, `SGD` or `AdamW`, whose hyperparameters may follow `schedules`, in f32 or under a
`MixedPrecision` policy), both cleaned up for partitioning (`cleanup.py`). The frameworks are optional dependencies,
imported when first used."""

from . import schedules
from .cleanup import clean_up, split_into_pieces
from .context_import import import_for_context
from .optimizers import SGD, AdamW
from .precision import MixedPrecision
from .program import ARG_ROLES, ImportedProgram, as_array
from .pytorch import from_torch
from .randomness import dropout_mask
from .torch_state import torch_state
from .training import training_step

__all__ = ["ARG_ROLES", "AdamW", "ImportedProgram", "SGD", "as_array", "clean_up", "dropout_mask", "from_torch",
           "import_for_context", "MixedPrecision", "schedules", "split_into_pieces", "torch_state", "training_step"]
