"""Arrays from what users pass: numpy arrays, array-likes and torch tensors, as numpy arrays.

Every layer that takes user data (the runtime's sessions, the API's `run`) converts it here. A torch tensor is
recognised by its module and methods, so nothing imports torch (an optional dependency).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import dtypes
from .errors import RunError


def as_array(value: Any) -> np.ndarray:
    """`value` as a numpy array: numpy arrays and array-likes as they are, torch tensors through
    `.detach().cpu().numpy()` (no copy for a contiguous CPU tensor); a bfloat16 tensor as `ml_dtypes.bfloat16`
    over the same bytes."""
    if type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach"):
        tensor = value.detach().cpu()
        torch = sys.modules[type(value).__module__.split(".")[0]]  # loaded: `value` is one of its tensors
        if tensor.dtype == torch.bfloat16:  # numpy has no bfloat16: the same bits as ml_dtypes.bfloat16
            return tensor.view(torch.int16).numpy().view(dtypes.numpy_dtype("bf16"))
        try:
            return tensor.numpy()
        except TypeError as exc:  # e.g. float8, which Slicer has no dtype for
            raise RunError(f"a torch tensor of dtype {value.dtype} has no numpy equivalent ({exc}); convert it "
                           f"(e.g. .float()) and import the model in that dtype ({dtypes.unsupported(value.dtype)})"
                           ) from None
    return np.asarray(value)


def as_tensor(array: np.ndarray, torch):
    """`array` as a torch tensor sharing its memory (`torch.from_numpy`); a bfloat16 array through its int16
    view, which torch reinterprets as torch.bfloat16. `torch` is the torch module (this layer does not import
    it)."""
    if dtypes.element_type(array.dtype) == "bf16":
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


__all__ = ["as_array", "as_tensor"]
