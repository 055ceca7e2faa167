"""Arrays from what users pass: numpy arrays, array-likes and torch tensors, as numpy arrays.

Every layer that takes user data (the runtime's sessions, the API's `run`) converts it here. A torch tensor is
recognised by its module and methods, so nothing imports torch (an optional dependency).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import RunError


def as_array(value: Any) -> np.ndarray:
    """`value` as a numpy array: numpy arrays and array-likes as they are, torch tensors through
    `.detach().cpu().numpy()` (no copy for a contiguous CPU tensor)."""
    if type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        try:
            return value.detach().cpu().numpy()
        except TypeError as exc:  # e.g. bfloat16, which numpy has no dtype for
            raise RunError(f"a torch tensor of dtype {value.dtype} has no numpy equivalent ({exc}); convert it "
                           "(e.g. .float()) and import the model in that dtype") from None
    return np.asarray(value)


__all__ = ["as_array"]
